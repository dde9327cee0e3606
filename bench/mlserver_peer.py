"""Seldon MLServer in its Kafka mode as a contender: the same Keras file behind a custom runtime.

MLServer's pins clash with ours (numpy 2, protobuf 6), so it lives in its own venv; TensorFlow
comes from the project's venv through a ``.pth`` file appended *after* MLServer's own packages::

    python3.11 -m venv /tmp/headrace-mlserver-venv
    /tmp/headrace-mlserver-venv/bin/pip install mlserver==1.7.1
    echo /work/main/.venv/lib/python3.11/site-packages \\
        > /tmp/headrace-mlserver-venv/lib/python3.11/site-packages/zz-headrace.pth

(``HEADRACE_MLSERVER_VENV`` points elsewhere.) How MLServer's Kafka mode works (1.7.1,
mlserver/kafka/server.py): an aiokafka consumer with no group (so it starts at the *latest*
offset: a preloaded topic is skipped, requests are sent once it is consuming), one asyncio task a
message, V2 inference request JSON in, the model named by the ``mlserver-model`` header, the
response produced with ``send_and_wait`` one at a time, keyed by the request's key. Adaptive
batching (``max_batch_size``/``max_batch_time``) groups concurrent requests for the model.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _common as c

from headrace.core.ports import free_port

VENV = Path(os.environ.get("HEADRACE_MLSERVER_VENV", "/tmp/headrace-mlserver-venv"))
MODEL = "bench"
HEADERS = [("mlserver-model", MODEL.encode()), ("content-type", b"application/json")]

RUNTIME = '''
import asyncio, base64, io
import numpy as np
from PIL import Image
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class KerasRuntime(MLModel):
    async def load(self) -> bool:
        # Off the event loop: importing TF and loading take tens of seconds on a loaded box,
        # and a blocked loop times out aiokafka's bootstrap connection (seen: "Unable connect").
        p = self.settings.parameters.extra
        self._kind = p["kind"]
        self._side = int(p.get("side", 0))
        self._model = await asyncio.get_running_loop().run_in_executor(None, self._load)
        return True

    def _load(self):
        import keras
        return keras.saving.load_model(self.settings.parameters.uri, compile=False)

    def _inputs(self, data):
        if self._kind == "text":
            return np.asarray([str(s) for s in data], object)[:, None]
        out = np.empty((len(data), self._side, self._side, 3), np.float32)
        for i, s in enumerate(data):
            im = Image.open(io.BytesIO(base64.b64decode(s))).convert("RGB")
            out[i] = np.asarray(im.resize((self._side, self._side)), np.float32)
        return out

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = self._inputs(payload.inputs[0].data.root)
        y = np.asarray(self._model(x, training=False), np.float32)
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=[ResponseOutput(
            name="scores", shape=list(y.shape), datatype="FP32", data=y.ravel().tolist())])
'''


def available() -> str | None:
    """None when the peer venv is usable, else why not (and how to create it)."""
    exe = VENV / "bin" / "mlserver"
    if not exe.exists():
        return (f"no MLServer venv at {VENV} (create it as bench/mlserver_peer.py's docstring "
                "says, or set HEADRACE_MLSERVER_VENV)")
    return None


def requests(values: list[bytes], kind: str = "image") -> list[bytes]:
    """V2 inference requests, one row each: base64 images or texts as BYTES."""
    out = []
    for v in values:
        data = base64.b64encode(v).decode() if kind == "image" else v.decode()
        out.append(json.dumps({"inputs": [{"name": kind, "shape": [1], "datatype": "BYTES",
                                           "data": [data]}]}).encode())
    return out


def run(a: Any, *, kind: str, side: int, keras_file: Path, make_values: Any) -> dict[str, Any]:
    """Start MLServer on ``a.input``/``a.output``, warm it up, print READY; with
    ``a.self_send`` send ``a.rows`` requests at once (the throughput run), else wait for a
    paced upstream; count ``a.rows`` responses."""
    from confluent_kafka import TopicPartition

    from headrace.streams.clients import make_consumer, make_producer

    work = Path(tempfile.mkdtemp(prefix="bench-mlserver-"))
    (work / "runtime_keras.py").write_text(RUNTIME)
    (work / "model-settings.json").write_text(json.dumps({
        "name": MODEL, "implementation": "runtime_keras.KerasRuntime",
        "max_batch_size": a.batch_size, "max_batch_time": a.max_wait_ms / 1000,
        "parameters": {"uri": str(keras_file), "extra": {"kind": kind, "side": side}}}))
    (work / "settings.json").write_text(json.dumps({
        "kafka_enabled": True, "kafka_servers": a.bootstrap, "kafka_topic_input": a.input,
        "kafka_topic_output": a.output, "http_port": free_port(), "grpc_port": free_port(),
        "metrics_port": free_port(), "parallel_workers": 0, "debug": False}))
    log = open(work / "mlserver.log", "w")  # noqa: SIM115  (lives as long as the server)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(work))
    proc = subprocess.Popen([str(VENV / "bin" / "mlserver"), "start", str(work)], cwd=work,
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    conn = c._conn(a.bootstrap)
    out = make_consumer(conn, f"mls-{uuid.uuid4().hex}")
    out.assign([TopicPartition(a.output, 0, 0)])
    prod = make_producer(conn, **{"enable.idempotence": False})
    probe = requests(make_values(1), kind)[0]
    try:
        # The consumer starts at the latest offset: probe until a response comes back.
        deadline = time.monotonic() + 240
        got = False
        while not got:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work / "mlserver.log").read_text()[-3000:]
                raise SystemExit(f"mlserver did not answer (exit {proc.poll()}):\n{tail}")
            prod.produce(a.input, probe, f"probe{uuid.uuid4().hex[:6]}", headers=HEADERS)
            prod.flush(10)
            for m in out.consume(num_messages=1000, timeout=2.0):
                if m.error() is None and (m.key() or b"").startswith(b"probe"):
                    got = True
        print("READY", flush=True)
        if a.self_send:
            for i, v in enumerate(requests(make_values(a.rows), kind)):
                while True:
                    try:
                        prod.produce(a.input, v, f"m{i}", headers=HEADERS)
                        break
                    except BufferError:
                        prod.poll(0.05)
            prod.flush(60)
        n, t0, errors = 0, None, 0
        deadline = time.monotonic() + 600
        while n < a.rows and time.monotonic() < deadline and proc.poll() is None:
            for m in out.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None or (m.key() or b"").startswith(b"probe"):
                    continue
                t0 = t0 or time.perf_counter()
                n += 1
                errors += b'"outputs"' not in m.value()
        took = time.perf_counter() - (t0 or time.perf_counter())
        rss = c.tree_rss_mib(proc.pid)
        if n < a.rows:
            tail = (work / "mlserver.log").read_text()[-2000:]
            raise SystemExit(f"mlserver answered {n} of {a.rows}:\n{tail}")
        # As for the others, the clock starts at the first output: n - 1 intervals.
        return {"rows": n - 1, "seconds": took, "extra_rss_mib": rss, "errors": errors}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()
