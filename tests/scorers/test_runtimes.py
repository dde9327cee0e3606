"""Keras models on the JAX and PyTorch runtimes: models trained by the real trainer (an mlp, a
cnn, MobileNetV2 from ``keras.applications``, a user code model, the text family and an mlp
over a category and a number, whose ids the host makes) are scored from the stream
by a scorer process on each runtime, and ``headrace predict --runtime`` offline; both give the
TensorFlow runtime's predictions on held-out records (scores within ``ATOL``, the same labels).

Each runtime runs in its own process (Keras reads its backend once, at import; this test
process has Keras on TensorFlow). One thread each: OMP/XLA/torch see one core.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from PIL import Image

from headrace.contracts import CodeRef, ModelSpec, TrainRequested
from headrace.core.settings import load_settings
from headrace.scorers import offline
from headrace.store import code
from headrace.store.versions import set_alias
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import catalog, data_topic, predictions_topic
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.fixtures import read_topic
from tests.scorers.conftest import send_json, send_raw
from tests.trainers import families_data as fd

REPO = Path(__file__).resolve().parents[2]
# Largest |score difference| allowed against TensorFlow (softmax scores; measured on this CPU:
# under 1e-6 for every model here; on an H200 1.5e-4 torch and 9e-4 JAX, ENGINEERING.md §11).
ATOL = 2e-3
HELD_OUT = 48
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
              "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}

pytestmark = pytest.mark.slow


def _train(root: Path, name: str, uri: str, spec: ModelSpec) -> None:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name,
                         framework="tensorflow", dataset_uri=uri, spec=spec)
    jid, _ = jobs.create_request(root, req)
    assert run_job(root=root, job_id=jid, conn=None) == ExitCode.OK, jobs.read_status(root, jid)
    st = jobs.read_status(root, jid)
    assert st is not None and st.version is not None
    set_alias(root, name, st.version)  # served whatever the gate said (one epoch may not pass)


def _png(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img, mode="L").save(buf, format="PNG")
    return buf.getvalue()


class Zoo:
    """The trained models on one DFS, and each one's held-out records (never trained on)."""

    def __init__(self, root: Path, work: Path) -> None:
        from sklearn.datasets import load_digits, load_wine

        self.root = root
        wine = load_wine()
        order = np.random.default_rng(0).permutation(len(wine.target))
        train, held = order[:-HELD_OUT], order[-HELD_OUT:]
        names = [f"x{i}" for i in range(wine.data.shape[1])]
        table = {n: wine.data[train, i] for i, n in enumerate(names)}
        table["label"] = wine.target[train]
        pcsv.write_csv(pa.table(table), work / "wine.csv")
        wine_uri = put_dataset(root=root, path=work / "wine.csv", name="wine").uri
        self.wine_rows = [{n: float(v) for n, v in zip(names, r, strict=True)}
                          for r in wine.data[held]]
        digits = np.clip(load_digits().images * (255 / 16), 0, 255).astype(np.uint8)
        self.pngs = [_png(img) for img in digits[-HELD_OUT:]]  # folder rows come from the front
        digits_uri = put_dataset(root=root, path=fd.digits_folder(work / "dig", rows=300),
                                 name="digits").uri
        few_uri = put_dataset(root=root, path=fd.digits_folder(work / "few", rows=32),
                              name="few").uri
        t0 = time.perf_counter()
        ref = code.push(root, REPO / "examples" / "model_code", "tabular-net").ref
        _train(root, "mlp", wine_uri, ModelSpec(model="mlp", epochs=20, batch_size=32))
        _train(root, "cnn", digits_uri, ModelSpec(model="cnn", epochs=3, batch_size=64,
                                                  hidden=(32,), learning_rate=0.003))
        _train(root, "mobilenet", few_uri, ModelSpec(model="mobilenet_v2", epochs=1,
                                                     batch_size=32, image_size=(32, 32)))
        _train(root, "usercode", wine_uri, ModelSpec(
            model=CodeRef(code=ref, entrypoint="tabular_net.keras_model:build"), epochs=20,
            batch_size=32, learning_rate=0.01))
        texts = fd.intents_jsonl(work / "intents.jsonl", rows=400 + HELD_OUT, seed=5)
        lines = texts.read_text().splitlines()
        texts.write_text("\n".join(lines[:-HELD_OUT]) + "\n")
        self.text_rows = [{"utterance": json.loads(r)["utterance"]} for r in lines[-HELD_OUT:]]
        _train(root, "text", put_dataset(root=root, path=texts, name="intents").uri,
               ModelSpec(model="text", epochs=3))
        rng = np.random.default_rng(5)
        n = 300 + HELD_OUT
        color = rng.choice(["red", "green", "blue", "teal"], n)
        size = rng.normal(size=n)
        pcsv.write_csv(pa.table({"color": color[:-HELD_OUT], "size": size[:-HELD_OUT],
                                 "label": ((color == "red") ^ (size > 0))[:-HELD_OUT]
                                 .astype(np.int64)}), work / "mixed.csv")
        self.mixed_rows = [{"color": str(c), "size": float(s)}
                           for c, s in zip(color[-HELD_OUT:], size[-HELD_OUT:], strict=True)]
        self.mixed_rows[0]["color"] = "mauve"  # a category the training split never had
        _train(root, "mixed", put_dataset(root=root, path=work / "mixed.csv", name="mixed").uri,
               ModelSpec(model="mlp", epochs=5))
        print(f"trained the zoo in {time.perf_counter() - t0:.1f}s")

    def records(self, model: str) -> list[Any]:
        if model in JSON_ROWS:
            return {"mlp": self.wine_rows, "usercode": self.wine_rows, "text": self.text_rows,
                    "mixed": self.mixed_rows}[model]
        return list(self.pngs)

    def on_tensorflow(self, model: str) -> list[dict[str, Any]]:
        """The TensorFlow runtime's predictions (this process's Keras is TensorFlow's)."""
        m = offline.load(self.root, model, device="cpu")
        keys = [f"k{i}" for i in range(HELD_OUT)]
        out = m.predict(self.records(model), keys=keys)
        assert all(isinstance(o, dict) and "error" not in o for o in out), out[:2]
        return out  # type: ignore[return-value]


MODELS = ("mlp", "cnn", "mobilenet", "usercode", "text", "mixed")
JSON_ROWS = ("mlp", "usercode", "text", "mixed")  # the others are PNG messages


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Zoo:
    return Zoo(tmp_path_factory.mktemp("dfs"), tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="module")
def reference(zoo: Zoo) -> dict[str, list[dict[str, Any]]]:
    return {m: zoo.on_tensorflow(m) for m in MODELS}


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD, **extra}


def _agree(got: list[dict[str, Any]], want: list[dict[str, Any]], what: str) -> float:
    """The same labels, scores within ATOL; the largest difference."""
    assert [g["label"] for g in got] == [w["label"] for w in want], what
    diff = np.abs(np.asarray([g["scores"] for g in got]) - np.asarray([w["scores"] for w in want]))
    assert diff.max() <= ATOL, f"{what}: largest score difference {diff.max():.2e}"
    return float(diff.max())


@pytest.fixture
def scorer_on(broker: str, zoo: Zoo, tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(runtime: str, pairs: list[str]) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{runtime}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen([sys.executable, "-m", "tests.scorers.runtime_proc", runtime,
                              *pairs], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             env=_env(HEADRACE_BOOTSTRAP=broker,
                                      HEADRACE_DFS_ROOT=str(zoo.root)))
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


@pytest.mark.parametrize("runtime", ["jax", "torch"])
def test_every_model_scores_from_the_stream_as_on_tensorflow(
        runtime: str, broker: str, conn: KafkaConnection, zoo: Zoo, tmp_path: Path,
        reference: dict[str, list[dict[str, Any]]], scorer_on: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    streams = {m: f"rt{tag}{m}" for m in MODELS}
    ensure_topics(conn, catalog(load_settings(bootstrap=broker, dfs_root=zoo.root,
                                              streams=list(streams.values()), partitions=1)))
    for m, s in streams.items():
        if m in JSON_ROWS:
            send_json(conn, data_topic(s), zoo.records(m))
        else:
            for i, png in enumerate(zoo.pngs):
                send_raw(conn, data_topic(s), [png], key=f"k{i}", content_type="image/png")
    proc = scorer_on(runtime, [f"{s}={m}" for m, s in streams.items()])
    worst = {}
    for m, s in streams.items():
        msgs = read_topic(conn, predictions_topic(s), expect=HELD_OUT, timeout_s=180,
                          settle_s=0.2)
        assert proc.poll() is None, (tmp_path / f"{runtime}.log").read_text()[-3000:]
        got = sorted((json.loads(v.value()) for v in msgs), key=lambda p: p["source_offset"])
        assert len(got) == HELD_OUT and all(p["model_name"] == m for p in got)
        worst[m] = _agree(got, reference[m], f"{m} on {runtime}")
    log = (tmp_path / f"{runtime}.log").read_text()
    assert f"on the {runtime} runtime" in log and "refused" not in log
    print(f"{runtime}: largest |score - TensorFlow's| per model: "
          + ", ".join(f"{m} {d:.1e}" for m, d in worst.items()))


@pytest.mark.parametrize("runtime", ["jax", "torch"])
def test_predict_runtime_gives_tensorflows_predictions(
        runtime: str, zoo: Zoo, tmp_path: Path,
        reference: dict[str, list[dict[str, Any]]]) -> None:
    folder = tmp_path / "held"
    folder.mkdir()
    for i, png in enumerate(zoo.pngs):
        (folder / f"k{i:02d}.png").write_bytes(png)
    out = subprocess.run(
        [sys.executable, "-c", "from headrace.cli import main; main()", "predict", "cnn",
         str(folder), "--json", "--runtime", runtime], cwd=REPO, capture_output=True,
        env=_env(HEADRACE_DFS_ROOT=str(zoo.root)), timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    got = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert [g["key"] for g in got] == [f"k{i:02d}.png" for i in range(HELD_OUT)]
    _agree(got, reference["cnn"], f"predict --runtime {runtime}")
