"""Shared fault-test machinery: a tiny model, scorer subprocesses, load, a fresh reader, a checker.

Everything here talks to the real thing: a real broker, real scorer processes started through the
project's entry point, the real model store. Figures are printed (``FIGURES <test>: k=v ...``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from headrace.core.ports import free_port
from headrace.store.manifest import Manifest
from headrace.store.versions import ModelVersion, publish, set_alias
from headrace.streams import headers as hdr
from headrace.streams import topics
from headrace.streams.client_errors import Kind, kind_of
from headrace.streams.clients import KafkaConnection, ensure_topics, partitions_of
from headrace.streams.dlq import (
    DLQ_ERROR_CLASS,
    DLQ_ERROR_MESSAGE,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_STAGE,
)
from headrace.streams.topics import TopicSpec
from tests.fixtures import eventually, from_the_start

FEATURES = tuple(f"f{i}" for i in range(8))
CLASSES = ("no", "yes")
Headers = list[tuple[str, str | bytes | None]]
JSON_HEADERS: Headers = [(hdr.CONTENT_TYPE, hdr.JSON.encode())]


def figures(test: str, **values: object) -> str:
    line = f"FIGURES {test}: " + " ".join(f"{k}={v}" for k, v in values.items())
    print(line, flush=True)
    return line


# -- a tiny TensorFlow model -----------------------------------------------------------------
def write_keras_mlp(directory: Path, *, seed: int = 0, width: int = len(FEATURES),
                    outputs: int = len(CLASSES)) -> None:
    """A Keras 3 MLP saved as ``model.keras`` (what the TensorFlow adapter loads)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((width,)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(outputs, activation="softmax"),
    ])
    model.save(directory / "model.keras")


def tiny_manifest(name: str) -> Manifest:
    return Manifest(name=name, framework="tensorflow", task="classifier", features=FEATURES,
                    label="y", classes=CLASSES)


def publish_tiny_model(root: Path, name: str, *, seed: int = 0, alias: str | None = "production",
                       hook: Callable[[str], None] | None = None) -> ModelVersion:
    """Publish a tiny classifier through the store's real protocol; point ``alias`` at it."""
    kwargs: dict[str, Any] = {} if hook is None else {"hook": hook}
    mv = publish(root, tiny_manifest(name), lambda d: write_keras_mlp(d, seed=seed), **kwargs)
    if alias:
        set_alias(root, name, mv.version, alias=alias)
    return mv


# -- topics ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    name: str
    partitions: int = 3

    @property
    def data(self) -> str:
        return topics.data_topic(self.name)

    @property
    def predictions(self) -> str:
        return topics.predictions_topic(self.name)

    @property
    def dlq(self) -> str:
        return topics.dlq_topic(self.name)

    @property
    def group(self) -> str:
        return topics.scorer_group(self.name)


def new_stream(conn: KafkaConnection, *, partitions: int = 3) -> Stream:
    s = Stream(f"f{uuid.uuid4().hex[:10]}", partitions)
    ensure_stream_topics(conn, s)
    return s


def ensure_stream_topics(conn: KafkaConnection, s: Stream) -> None:
    ensure_topics(conn, [TopicSpec(s.data, s.partitions, "test"),
                         TopicSpec(s.predictions, s.partitions, "test"),
                         TopicSpec(s.dlq, 1, "test"),
                         TopicSpec(topics.MODEL_EVENTS, 1, "test")])


# -- scorer subprocesses ---------------------------------------------------------------------
@cache
def cli_has_score() -> bool:
    """Whether ``headrace score`` is registered (else ``python -m headrace.scorers`` is used)."""
    out = subprocess.run([sys.executable, "-c", "from headrace.cli import main; main()",
                          "score", "--help"], capture_output=True, text=True, timeout=120)
    return out.returncode == 0


@cache
def scorer_entry_point() -> str | None:
    """A runnable scorer entry point, or None when the scorers area has none yet."""
    if cli_has_score():
        return "cli"
    try:
        import headrace.scorers.__main__  # noqa: F401
    except ImportError:
        return None
    return "module"


class ScorerProcess:
    """One scorer subprocess; stderr goes to a log file for post-mortems."""

    def __init__(self, *, stream: Stream, model: str, bootstrap: str, dfs: Path, log_dir: Path,
                 batch_size: int = 256, max_wait_ms: int = 20, grace_s: float = 10.0,
                 model_poll_s: float = 1.0, extra_env: dict[str, str] | None = None) -> None:
        self.stream, self.port = stream, free_port()
        self.log_path = log_dir / f"scorer-{uuid.uuid4().hex[:6]}.log"
        env = {**os.environ, "HEADRACE_BOOTSTRAP": bootstrap, "HEADRACE_DFS_ROOT": str(dfs),
               "HEADRACE_SCORER_STREAM": stream.name, "HEADRACE_SCORER_MODEL": model,
               "HEADRACE_SCORER_BATCH_SIZE": str(batch_size),
               "HEADRACE_SCORER_MAX_WAIT_MS": str(max_wait_ms),
               "HEADRACE_SCORER_HTTP_PORT": str(self.port),
               "HEADRACE_SCORER_HTTP_HOST": "127.0.0.1",
               "HEADRACE_SCORER_GRACE_S": str(grace_s),
               "HEADRACE_SCORER_MODEL_POLL_S": str(model_poll_s),
               "HEADRACE_SCORER_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "",
               "TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTEROP_THREADS": "1",
               "TF_NUM_INTRAOP_THREADS": "1", **(extra_env or {})}
        env.pop("HEADRACE_TEST_BOOTSTRAP", None)
        if scorer_entry_point() == "cli":
            cmd = [sys.executable, "-c", "from headrace.cli import main; main()", "score",
                   stream.name, "--model", model, "--batch-size", str(batch_size),
                   "--max-wait-ms", str(max_wait_ms), "--http-port", str(self.port),
                   "--grace-s", str(grace_s)]
        else:
            cmd = [sys.executable, "-m", "headrace.scorers"]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def probe(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=1) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout_s: float = 45.0) -> float:
        """Seconds from process start until /readyz answers 200."""
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"scorer exited {self.proc.returncode} before ready:\n"
                                     f"{self.log_tail()}")
            return self.probe("/readyz") == 200

        try:
            eventually(ready, timeout_s=timeout_s, interval_s=0.1, what="/readyz")
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{self.log_tail()}") from None
        return time.monotonic() - self.started

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def terminate(self, timeout_s: float = 30.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds to exit)."""
        t0 = time.monotonic()
        self.signal(signal.SIGTERM)
        rc = self.wait(timeout_s)
        return rc, time.monotonic() - t0

    def wait(self, timeout_s: float) -> int:
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self._log.close()
        return rc

    def log_tail(self, chars: int = 3000) -> str:
        """The log's end, then how the process ended if it has (a SIGKILL writes no line)."""
        if not self._log.closed:  # closed once the process was waited for (``terminate``)
            self._log.flush()
        try:
            tail = self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            tail = ""
        return tail + exit_note(self.proc.poll())


def exit_note(rc: int | None) -> str:
    """How a process ended, for a failure message: its exit code, or the signal that killed it
    (-9: SIGKILL, the kernel's OOM killer among others; -6: an abort)."""
    if rc is None:
        return ""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"\n[the process was killed by {name} (exit {rc})]"
    return f"\n[the process exited {rc}]"


class ControlProcess:
    """A control plane subprocess (``tests.trainers.control_proc``, local executor) with its
    probes on a known port; its output goes to a log file."""

    def __init__(self, *, bootstrap: str, dfs: Path, log_dir: Path, prefix: str) -> None:
        self.port = free_port()
        self.log_path = log_dir / f"control-{uuid.uuid4().hex[:6]}.log"
        conf = {"root": str(dfs), "bootstrap": bootstrap, "prefix": prefix,
                "http_port": self.port}
        env = {**os.environ, "HEADRACE_BOOTSTRAP": bootstrap, "HEADRACE_DFS_ROOT": str(dfs),
               "PYTHONUNBUFFERED": "1"}
        env.pop("HEADRACE_TEST_BOOTSTRAP", None)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.trainers.control_proc", json.dumps(conf)],
            cwd=Path(__file__).resolve().parents[2], env=env, stdout=self._log,
            stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def probe(self, path: str) -> tuple[int, dict[str, Any]] | None:
        """(status, JSON body), or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status), json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), json.loads(exc.read() or b"{}")
        except (OSError, ValueError):
            return None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def routes_a_request(self, conn: KafkaConnection, dfs: Path, prefix: str, key: str) -> None:
        """A train request made now is routed: run, refused by its missing dataset (a failed
        job, fast), and said so on events.jobs."""
        from headrace.contracts import JobEvent, JobEventKind, JobState
        from headrace.streams.reading import read_events
        from headrace.streams.topics import ControlTopics
        from headrace.trainers import api, jobs

        control_topics = ControlTopics.with_prefix(prefix)
        request = api.build_request(model_name="after-restart", framework="mxnet",
                                    dataset_uri="datasets/missing.parquet",
                                    idempotency_key=key)
        jid = api.request_training(conn=conn, request=request, topics=control_topics)

        def routed() -> bool:
            st = jobs.read_status(dfs, jid)
            return st is not None and st.state == JobState.FAILED

        eventually(routed, timeout_s=90, interval_s=0.5,
                   what=f"the request routed after the restart:\n{self.log_tail()}")
        def kinds() -> list[JobEventKind]:
            return [e.kind for e in read_events(conn, control_topics.jobs, JobEvent, idle_s=0.5)
                    if e.job_id == jid]

        # The event follows the status file; on a cluster just restarted, not always at once.
        eventually(lambda: JobEventKind.FAILED in kinds(), timeout_s=60, interval_s=1.0,
                   what=f"FAILED for {jid} on {control_topics.jobs}")

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


class Scorers:
    """Every scorer a test starts, so a failing test never leaves one behind."""

    def __init__(self, **defaults: Any) -> None:
        self.defaults = defaults
        self.all: list[ScorerProcess] = []

    def start(self, **overrides: Any) -> ScorerProcess:
        p = ScorerProcess(**{**self.defaults, **overrides})
        self.all.append(p)
        return p

    def cleanup(self) -> None:
        for p in self.all:
            if p.alive():
                p.proc.kill()
                p.wait(10)


# -- load ------------------------------------------------------------------------------------
def good_record(i: int) -> bytes:
    """Deterministic features, so every re-score of record ``i`` is byte-identical."""
    vals = {f: round(((i * 7919 + j * 104729) % 1000) / 500.0 - 1.0, 3)
            for j, f in enumerate(FEATURES)}
    return json.dumps(vals, separators=(",", ":")).encode()


class DataTopicKeys:
    """Where each key of a data topic sits, read incrementally by a fresh consumer."""

    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        self.conn, self.topic = conn, topic
        self.where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
        self._consumer: Consumer | None = None

    def locate(self, keys: set[bytes], timeout_s: float) -> dict[bytes, set[tuple[int, int]]]:
        """The offsets of ``keys``, reading on until all are found or ``timeout_s`` passes."""
        if self._consumer is None:
            self._consumer = from_the_start(self.conn, self.topic)
        deadline = time.monotonic() + timeout_s
        while not keys <= self.where.keys() and time.monotonic() < deadline:
            for m in self._consumer.consume(10_000, 0.3):
                key = m.key()
                if m.error() is None and isinstance(key, bytes):
                    self.where[key].add((int(m.partition() or 0), int(m.offset() or 0)))
        return {k: self.where[k] for k in keys if k in self.where}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class LoadGenerator:
    """Produce JSON records to ``data.<stream>`` at ``rate`` per second; remember acked offsets.

    ``epoch`` separates acknowledgements from before and after a broker restart (a memory-only
    broker restarts its offsets from 0). An idempotent producer's retry of a batch the broker
    already had is acknowledged without an offset (DUPLICATE_SEQUENCE_NUMBER, offset -1001):
    ``all_acked`` finds those records by key (keys are unique) in the data topic.
    """

    def __init__(self, conn: KafkaConnection, stream: Stream, *, rate: float, total: int,
                 idempotent: bool = True, make: Callable[[int], bytes] = good_record,
                 keys: DataTopicKeys | None = None) -> None:
        conf: dict[str, Any] = {**conn.base(), "acks": "all", "linger.ms": 5,
                                "enable.idempotence": idempotent,
                                "message.timeout.ms": 120_000}
        self.producer = Producer(conf)
        self.stream, self.rate, self.total, self.make = stream, rate, total, make
        self.acked: dict[int, set[tuple[int, int]]] = defaultdict(set)
        self.acked_keys: dict[int, set[bytes]] = defaultdict(set)
        self.no_offset: dict[int, set[bytes]] = defaultdict(set)  # acked keys, offset unknown
        self.failed: list[str] = []
        self.epoch = 0
        self.sent = 0
        self.keys = keys if keys is not None else DataTopicKeys(conn, stream.data)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="loadgen")

    def start(self) -> LoadGenerator:
        self._thread.start()
        return self

    def _ack(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(err.str())
            return
        with self._lock:  # epoch at ack time
            offset = msg.offset()
            if offset is None or offset < 0:
                self.no_offset[self.epoch].add(msg.key())
            else:
                self.acked[self.epoch].add((msg.partition(), offset))
            self.acked_keys[self.epoch].add(msg.key())

    def _run(self) -> None:
        t0 = time.monotonic()
        while self.sent < self.total and not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate) + 1
            while self.sent < min(due, self.total):
                i = self.sent
                try:
                    self.producer.produce(self.stream.data, self.make(i), str(i).encode(),
                                          headers=JSON_HEADERS,
                                          on_delivery=self._ack)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                self.sent += 1
            self.producer.poll(0.01)
        self.producer.flush(120)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout_s: float = 120.0) -> None:
        self._thread.join(timeout_s)
        self.producer.flush(30)

    def stop(self) -> None:
        self._stop.set()
        self.join()

    def all_acked(self, locate_timeout_s: float = 30.0) -> set[tuple[int, int]]:
        """Every acknowledged record of this epoch as (partition, offset), those acknowledged
        without an offset located by key; one the data topic does not hold fails the test."""
        with self._lock:
            acked = set(self.acked[self.epoch])
            unknown = set(self.no_offset[self.epoch])
        if unknown:
            found = self.keys.locate(unknown, locate_timeout_s)
            lost = sorted(unknown - found.keys())
            assert not lost, (f"{len(lost)} records acknowledged without an offset are not in "
                              f"{self.stream.data}: keys {lost[:10]}")
            for where in found.values():
                acked |= where
            if self._stop.is_set():
                self.keys.close()
        return acked


def produce_all(conn: KafkaConnection, topic: str, values: Sequence[tuple[bytes | None, Any]],
                **overrides: Any) -> list[tuple[int, int]]:
    """Produce every (value, headers) in order (round-robin partitions); return acked offsets."""
    p = Producer({**conn.base(), "acks": "all", "linger.ms": 5, **overrides})
    acked: list[tuple[int, int] | None] = [None] * len(values)
    errors: list[str] = []
    parts = partitions_of(conn, topic)
    for i, (v, h) in enumerate(values):
        def cb(err: Any, msg: Any, i: int = i) -> None:
            if err is not None:
                errors.append(err.str())
            else:
                acked[i] = (msg.partition(), msg.offset())
        while True:
            try:
                p.produce(topic, v, str(i).encode(), headers=h, on_delivery=cb,
                          partition=parts[i % len(parts)])
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(60)
    assert not errors, errors[:3]
    return [a for a in acked if a is not None]


# -- reading what the broker holds -----------------------------------------------------------
@dataclass
class Out:
    partition: int
    offset: int
    value: bytes
    headers: dict[str, str]


class TopicReader:
    """A fresh consumer (no group commits) reading a topic from the beginning, incrementally."""

    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        self.conn, self.topic = conn, topic
        self.records: list[Out] = []
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = from_the_start(self.conn, self.topic)
        return self._consumer

    def poll(self, timeout_s: float = 0.5) -> int:
        c = self._open()
        n = 0
        for m in c.consume(10_000, timeout_s):
            if m.error() is not None:
                continue
            self.records.append(Out(int(m.partition() or 0), int(m.offset() or 0),
                                    m.value() or b"",
                                    hdr.to_dict(m.headers())))
            n += 1
        return n

    def drain(self, idle_s: float = 1.5, timeout_s: float = 30.0) -> list[Out]:
        """Read until nothing new arrives for ``idle_s`` (never trusts the high watermark)."""
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            if self.poll(0.3):
                last = time.monotonic()
        return self.records

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


@dataclass
class Check:
    """Each input offset mapped to its predictions and dead letters."""

    inputs: int
    predictions: int
    dead_letters: int
    missing: list[tuple[int, int]] = field(default_factory=list)
    duplicates: int = 0  # extra identical predictions (at-least-once redelivery)
    duplicated_offsets: list[tuple[int, int]] = field(default_factory=list)
    # duplicates that disagree: other model version, label or row, or scores beyond float32 rounding
    non_identical: list[tuple[int, int]] = field(default_factory=list)
    not_byte_identical: int = 0  # agree, but a last float32 digit differs (another batch size)
    both: list[tuple[int, int]] = field(default_factory=list)  # predicted and dead-lettered
    dlq_duplicates: list[tuple[int, int]] = field(default_factory=list)
    by_offset: dict[tuple[int, int], list[bytes]] = field(default_factory=dict)
    dlq_by_offset: dict[tuple[int, int], list[Out]] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        return {"inputs": self.inputs, "predictions": self.predictions,
                "dlq": self.dead_letters, "missing": len(self.missing),
                "duplicates": self.duplicates, "non_identical": len(self.non_identical),
                "not_byte_identical": self.not_byte_identical}


def predictions_agree(preds: Sequence[bytes]) -> bool:
    """Redelivered predictions of one offset agree: every field equal, scores to float32 rounding.

    CPU kernels round differently for other batch shapes, and a redelivered record is scored in
    another batch, so the last digit of a float32 score may differ; nothing else may.
    """
    first, *rest = [json.loads(p) for p in preds]
    for other in rest:
        if {k: v for k, v in other.items() if k != "scores"} != {
                k: v for k, v in first.items() if k != "scores"}:
            return False
        if not np.allclose(other["scores"], first["scores"], rtol=1e-5, atol=1e-6):
            return False
    return True


def check(inputs: set[tuple[int, int]], predictions: Sequence[Out], dlq: Sequence[Out],
          *, data_topic: str) -> Check:
    by: dict[tuple[int, int], list[bytes]] = defaultdict(list)
    for r in predictions:
        p = json.loads(r.value)
        assert p["source_topic"] == data_topic, p
        by[(int(p["source_partition"]), int(p["source_offset"]))].append(r.value)
    dl: dict[tuple[int, int], list[Out]] = defaultdict(list)
    for r in dlq:
        dl[(int(r.headers[DLQ_PARTITION]), int(r.headers[DLQ_OFFSET]))].append(r)
    c = Check(len(inputs), len(predictions), len(dlq), by_offset=dict(by), dlq_by_offset=dict(dl))
    for key in sorted(inputs):
        preds = by.get(key, [])
        if not preds and key not in dl:
            c.missing.append(key)
        if len(preds) > 1:
            c.duplicates += len(preds) - 1
            c.duplicated_offsets.append(key)
            if len(set(preds)) > 1:
                c.not_byte_identical += 1
                if not predictions_agree(preds):
                    c.non_identical.append(key)
        if preds and key in dl:
            c.both.append(key)
        if len(dl.get(key, [])) > 1:
            c.dlq_duplicates.append(key)
    return c


def wait_dead_letters(scorer: ScorerProcess, dlq: TopicReader, n: int) -> None:
    """Until ``dlq`` holds ``n`` dead letters, the scorer alive all along; then drained."""

    def arrived() -> bool:
        assert scorer.alive(), (f"the scorer exited {scorer.proc.returncode}:\n"
                                f"{scorer.log_tail()}")
        dlq.poll(0.2)
        return len(dlq.records) >= n

    eventually(arrived, timeout_s=60, interval_s=0.1, what=f"{n} dead letters")
    dlq.drain(idle_s=1.0, timeout_s=5)


def wait_covered(reader: TopicReader, inputs: Callable[[], set[tuple[int, int]]], *,
                 data_topic: str, timeout_s: float, dlq: TopicReader | None = None,
                 alive: Callable[[], bool] | None = None) -> float:
    """Poll predictions (and DLQ) until every input offset has an outcome (or ``alive`` says
    the scorer died); seconds taken."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s and (alive is None or alive()):
        reader.poll(0.3)
        if dlq is not None:
            dlq.poll(0.05)
        c = check(inputs(), reader.records, dlq.records if dlq else [], data_topic=data_topic)
        if not c.missing:
            return time.monotonic() - t0
    return time.monotonic() - t0


def settle(preds: TopicReader, dlq: TopicReader, acked: set[tuple[int, int]], *,
           data_topic: str, alive: Callable[[], bool], idle_s: float = 1.0) -> Check:
    """After the load: wait until every acknowledged offset has an outcome (or the scorer
    died), read what is still in flight on both topics, and check the two against the
    acknowledged records."""
    wait_covered(preds, lambda: acked, data_topic=data_topic, timeout_s=90, dlq=dlq,
                 alive=alive)
    preds.drain(idle_s=idle_s)
    dlq.drain(idle_s=0.5, timeout_s=5)
    return check(acked, preds.records, dlq.records, data_topic=data_topic)


def commit_ends(acked: set[tuple[int, int]]) -> dict[int, int]:
    """Per partition, the offset past its last acknowledged record: where the group's commit
    must be once every one of them is scored."""
    ends: dict[int, int] = {}
    for p, o in acked:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def committed(conn: KafkaConnection, group: str, topic: str,
              retry_s: float = 30.0) -> dict[int, int]:
    """The group's committed offset per partition (-1001: none), as the broker holds it; a
    retriable refusal (the group's coordinator moving or loading on a cluster) is asked again
    for up to ``retry_s``."""
    c = Consumer({**conn.base(), "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + retry_s
    try:
        while True:
            try:
                tps = c.committed([TopicPartition(topic, p) for p in partitions_of(conn, topic)],
                                  timeout=conn.timeout_s)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if (not isinstance(err, KafkaError) or kind_of(err) is not Kind.RETRIABLE
                        or time.monotonic() > deadline):
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def dlq_reason(letter: Out) -> tuple[str, str, str]:
    h = letter.headers
    return h.get(DLQ_STAGE, ""), h.get(DLQ_ERROR_CLASS, ""), h.get(DLQ_ERROR_MESSAGE, "")
