"""Scoring benchmark: Kafka-ML's loop vs a pass-through ceiling vs Headrace (JSON, Arrow).

Contenders, side by side in one run, each in its own subprocess (peak RSS is its own):

  a  kafka-ml      poll one message, model.predict it, json.dumps, produce; flush + commit
                   synchronously every 16 messages (bounded record count: it is ~100 rows/s)
  b  passthrough   consume + produce the same bytes in batches; no decode, no model; the
                   scorer's client path (positional headers, collector settings, acks
                   awaited after the next batch is consumed)
  c  headrace-json the real scorer (headrace.scorers.serving.Scorer), JSON one row a message,
                   with its default decode helper process (its RSS is added to the scorer's)
  d  headrace-arrow the real scorer, Arrow IPC batches of ARROW_ROWS rows a message
  e  model-alone   the compiled model on in-memory batches (no Kafka)

Same generated records (32 float32 features) and the same small MLP (32 -> 64 -> 64 -> 2,
random weights, TensorFlow). Throughput runs read a preloaded topic and are timed in steady
state: pass-through and Headrace alike start the clock once their first batch is through. The
latency runs offer 10 000 rows/s, one second of warm-up first, and report p50/p99 over the
measured records, from each input record's CreateTime to its output's CreateTime (with
``--transactional``, to when a ``read_committed`` reader got the output: the commit included).

Producer profile: by default pass-through, Headrace and the paced upstream all use
non-idempotent producers (the scorer's ``HEADRACE_SCORER_IDEMPOTENT=false``), because Tansu's
idempotent produce path moved ~1/3 of the bytes (the ~500 ms p99 once blamed on it is the paced
upstream's new idempotent producer, seen on Apache Kafka too: RESULTS.md); ``--idempotent``
runs every one of them idempotent (the scorer's default, right for a real Kafka);
``--transactional`` also runs Headrace exactly-once (one transaction a batch).
Broker: ``--broker tansu`` (default, embedded), ``kafka`` (an Apache Kafka KRaft cluster started
by tools/kafka_cluster.py, ``--kafka-brokers`` nodes) or ``both``: the same series on each, one
after the other, then a table of Kafka / Tansu ratios.
Run: ``python bench/bench_scoring.py [--quick] [--idempotent] [--broker tansu|kafka|both]
[--transactional] [--bootstrap HOST:PORT]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

FEATURES = tuple(f"f{i}" for i in range(32))
CLASSES = ("no", "yes")
ARROW_ROWS = 4096
MODEL = "benchmlp"


# -- shared setup ------------------------------------------------------------------------------
def make_records(n: int, seed: int = 0) -> list[bytes]:
    """JSON records as an upstream would send float32 features (shortest float32 repr)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    x = np.random.default_rng(seed).normal(size=(n, len(FEATURES))).astype(np.float32)
    cols = [pc.cast(pa.array(x[:, j]), pa.string()) for j in range(len(FEATURES))]
    parts: list[Any] = []
    for j, f in enumerate(FEATURES):
        parts += [("{" if j == 0 else ",") + f'"{f}":', cols[j]]
    parts += ["}", ""]
    lines = pc.binary_join_element_wise(*parts)
    return [v.encode() for v in lines.to_pylist()]


def arrow_messages(records: list[bytes]) -> list[bytes]:
    import pyarrow as pa
    import pyarrow.json as pajson

    from headrace.streams.codecs import encode_arrow

    schema = pa.schema([(f, pa.float32()) for f in FEATURES])
    out = []
    for s in range(0, len(records), ARROW_ROWS):
        t = pajson.read_json(pa.py_buffer(b"\n".join(records[s:s + ARROW_ROWS])),
                             parse_options=pajson.ParseOptions(explicit_schema=schema))
        out.append(encode_arrow(t))
    return out


def publish_model(root: Path) -> None:
    import keras

    from headrace.store.manifest import Manifest
    from headrace.store.versions import publish, set_alias

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((len(FEATURES),)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(len(CLASSES), activation="softmax"),
    ])
    mv = publish(root, Manifest(name=MODEL, framework="tensorflow", task="classifier",
                                features=FEATURES, label="y", classes=CLASSES),
                 lambda d: model.save(d / "model.keras"))
    set_alias(root, MODEL, mv.version)
    keras.utils.set_random_seed(1)  # version 2: the shadow candidate (same shape, other weights)
    cand = keras.Sequential([
        keras.Input((len(FEATURES),)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(len(CLASSES), activation="softmax"),
    ])
    publish(root, Manifest(name=MODEL, framework="tensorflow", task="classifier",
                           features=FEATURES, label="y", classes=CLASSES),
            lambda d: cand.save(d / "model.keras"))


def _conn(bootstrap: str, *, upstream: bool = False) -> Any:
    """The bench's clients, with the operator's librdkafka settings (HEADRACE_KAFKA_CONFIG,
    e.g. a compression.type to compare) as the scorer would take them; ``upstream``: the
    producer of the input records, another system's, without them."""
    from headrace.core.settings import load_settings
    from headrace.streams.clients import KafkaConnection

    extra = {} if upstream else dict(load_settings().kafka_config)
    return KafkaConnection(bootstrap=bootstrap, extra=extra, timeout_s=30.0)


def ensure(bootstrap: str, *names: str) -> None:
    from headrace.streams.clients import ensure_topics
    from headrace.streams.topics import TopicSpec

    ensure_topics(_conn(bootstrap), [TopicSpec(n, 1, "bench") for n in names])


def load_topic(bootstrap: str, topic: str, values: list[bytes], content_type: str,
               key_prefix: str = "k") -> None:
    from headrace.streams.clients import make_producer

    p = make_producer(_conn(bootstrap, upstream=True), **{"linger.ms": 20})
    h = [("content-type", content_type.encode())]
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, v, f"{key_prefix}{i}", headers=h)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def paced_send(bootstrap: str, topic: str, phases: list[tuple[str, list[bytes]]],
               headers: list[tuple[str, bytes]], rate_msgs_s: float, *,
               idempotent: bool = True, upstream: bool = True) -> None:
    """Offer ``rate_msgs_s`` messages/s in 10 ms ticks, each phase's keys ``<prefix><n>``, all
    from one producer: a new producer's first records wait for its producer id (~500 ms when
    idempotent, on Tansu and Apache Kafka alike), which the warm-up phase must absorb, not the
    measured one. ``upstream``: another system's producer, with the default 5 ms linger and
    without the operator's settings."""
    from headrace.streams.clients import make_producer

    p = make_producer(_conn(bootstrap, upstream=upstream),
                      **({} if idempotent else {"enable.idempotence": False}))
    per_tick = max(1, round(rate_msgs_s / 100))
    t0 = time.perf_counter()
    tick = 0
    for prefix, values in phases:
        for i in range(0, len(values), per_tick):
            for j in range(i, min(i + per_tick, len(values))):
                p.produce(topic, values[j], f"{prefix}{j}", headers=headers)
            p.poll(0)
            tick += 1
            wait = t0 + tick * 0.01 - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
    assert p.flush(30) == 0


def read_timestamps(bootstrap: str, topic: str, expect: int, timeout_s: float = 60.0,
                    ) -> dict[bytes, int]:
    from confluent_kafka import TopicPartition

    from headrace.streams.clients import make_consumer

    c = make_consumer(_conn(bootstrap), f"bench-read-{uuid.uuid4().hex}")
    c.assign([TopicPartition(topic, 0, 0)])
    out: dict[bytes, int] = {}
    deadline = time.monotonic() + timeout_s
    while len(out) < expect and time.monotonic() < deadline:
        for m in c.consume(num_messages=100_000, timeout=0.5):
            if m.error() is None:
                out[m.key()] = m.timestamp()[1]
    c.close()
    return out


# -- contenders (run in a child process) --------------------------------------------------------
def _rss_mib(pid: int | str = "self") -> float:
    """Peak RSS of a process image (VmHWM; ru_maxrss would include the forked parent's)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _load_keras(root: Path) -> Any:
    import keras

    from headrace.store.versions import resolve

    return keras.saving.load_model(resolve(root, MODEL).path / "model.keras", compile=False)


def contender_kafka_ml(a: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    from headrace.streams.clients import make_consumer, make_producer

    model = _load_keras(Path(a.dfs))
    conn = _conn(a.bootstrap)
    consumer = make_consumer(conn, f"kafkaml-{uuid.uuid4().hex}",
                             **{"enable.auto.offset.store": True})
    consumer.assign([TopicPartition(a.input, 0, 0)])
    producer = make_producer(conn)
    print("READY", flush=True)
    n = 0
    t0 = None
    while n < a.rows:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        t0 = t0 or time.perf_counter()
        record = json.loads(msg.value())
        x = np.array([[record[f] for f in FEATURES]], np.float32)
        scores = model.predict(x, verbose=0)[0]
        out = json.dumps({"key": msg.key().decode(), "offset": msg.offset(),
                          "scores": [float(s) for s in scores],
                          "label": CLASSES[int(np.argmax(scores))]})
        producer.produce(a.output, out.encode(), msg.key())
        n += 1
        if n % 16 == 0:
            producer.flush()
            consumer.commit(asynchronous=False)
    producer.flush()
    consumer.commit(asynchronous=False)
    return {"rows": n, "seconds": time.perf_counter() - (t0 or time.perf_counter())}


def _profile(a: argparse.Namespace) -> dict[str, Any]:
    """The producer profile shared by pass-through and Headrace (see --idempotent)."""
    from headrace.scorers.engine.stream_io import NON_IDEMPOTENT

    return {} if a.idempotent else dict(NON_IDEMPOTENT)


def contender_passthrough(a: argparse.Namespace) -> dict[str, Any]:
    """Consume + produce the same bytes with the scorer's client path: batch consume, the
    scorer's prediction headers passed positionally, its collector settings, and batch k's
    acknowledgements awaited after batch k+1 is consumed (acked, then committed)."""
    from confluent_kafka import TopicPartition

    from headrace.core import heap
    from headrace.scorers.wire.encoding import ARROW_HEADERS, JSON_HEADERS
    from headrace.streams.clients import make_consumer, make_producer

    heap.rarer_young_collections(8192)
    conn = _conn(a.bootstrap)
    consumer = make_consumer(conn, f"pass-{uuid.uuid4().hex}")
    consumer.assign([TopicPartition(a.input, 0, 0)])
    producer = make_producer(conn, **{"delivery.report.only.error": True}, **_profile(a))
    produce = producer.produce
    headers = ARROW_HEADERS if a.arrow else JSON_HEADERS
    print("READY", flush=True)
    n = 0
    t0 = None
    counted = 0
    pending = None
    while n < a.rows:
        # Same consume as the scorer's: what is fetched, else the first message to arrive.
        msgs = consumer.consume(num_messages=8192, timeout=0)
        if not msgs:
            first = consumer.poll(0.1)
            if first is None or first.error():
                continue
            msgs = [first, *consumer.consume(num_messages=8191, timeout=0)]
        if pending is not None:
            producer.flush()
            consumer.commit(message=pending, asynchronous=False)
        for m in msgs:
            while True:
                try:
                    produce(a.output, m.value(), m.key(), -1, None, None, 0, headers)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
        pending = msgs[-1]
        n += len(msgs) * (a.rows_per_msg if a.arrow else 1)
        if t0 is None:  # steady state: the clock starts once the first batch is through
            t0, counted = time.perf_counter(), n
    producer.flush()
    if pending is not None:
        consumer.commit(message=pending, asynchronous=False)
    return {"rows": n - counted, "seconds": time.perf_counter() - (t0 or time.perf_counter())}


def contender_headrace(a: argparse.Namespace) -> dict[str, Any]:
    from headrace.core.settings import load_settings
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.serving import Scorer

    settings = load_settings(bootstrap=a.bootstrap, dfs_root=a.dfs, streams=[a.stream],
                             partitions=1)
    if a.shadow:  # every batch also scored by version 2, published to the shadow topic
        from headrace.ops.rollout.control import start_shadow
        from headrace.streams.topics import ControlTopics

        start_shadow(root=Path(a.dfs), conn=_conn(a.bootstrap), ref=f"{MODEL}:2",
                     stream=a.stream, topics=ControlTopics.of(settings))
    scorer = Scorer(settings, load_scorer_settings(
        stream=a.stream, model=MODEL, partitions="0", http_port=0, http_host="127.0.0.1",
        batch_size=a.batch_size, max_wait_ms=a.max_wait_ms, device="cpu",
        idempotent=a.idempotent, transactional=a.transactional),
        conn=_conn(a.bootstrap))
    stop = threading.Event()
    t = threading.Thread(target=scorer.run, args=(stop,), daemon=True)
    t.start()
    while not (scorer.state.ready()[0]):
        time.sleep(0.01)
    print("READY", flush=True)
    reg = scorer.metrics.registry

    def scored() -> float:
        if not t.is_alive():
            raise SystemExit("scorer died")
        return reg.get_sample_value("headrace_scorer_rows_total", {"stream": a.stream}) or 0.0

    while (first := scored()) == 0:  # steady state: the clock starts at the first batch out
        time.sleep(0.001)
    t0, busy0 = time.perf_counter(), machine_busy_s()
    # Each wake-up of this thread takes the GIL from the scorer's thread: at 2 ms that handoff
    # cost the scorer ~20% on 2 cores. 20 ms adds at most 20 ms to a run of seconds.
    while scored() < a.rows:
        time.sleep(0.02)
    took, busy = time.perf_counter() - t0, machine_busy_s() - busy0
    # The decode helpers are the scorer's too: their peak RSS counts in its memory.
    decoders = scorer.worker.decoders if scorer.worker is not None else None
    helpers = sum(_rss_mib(pid) for pid in (decoders.pids if decoders else []))
    stop.set()
    t.join(30)
    shadow = {m.name: sum(x.value for x in m.samples if x.name.endswith("_total"))
              for m in reg.collect() if m.name in ("headrace_shadow_rows",
                                                    "headrace_shadow_dropped_rows")}
    return {"rows": a.rows - first, "seconds": took, "extra_rss_mib": helpers, "busy_s": busy,
            "shadow_rows": shadow.get("headrace_shadow_rows", 0.0),
            "shadow_dropped": shadow.get("headrace_shadow_dropped_rows", 0.0)}


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process: the broker,
    the scorer, its decode helpers), from /proc/stat; NaN where there is none."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)  # idle + iowait
    return (sum(cpu[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def contender_model(a: argparse.Namespace) -> dict[str, Any]:
    from headrace.scorers.engine.models import load_model

    model = load_model(root=Path(a.dfs), name=MODEL, alias="production", device="cpu",
                       max_batch=a.batch_size)
    x = np.random.default_rng(0).normal(size=(a.batch_size, len(FEATURES))).astype(np.float32)
    n = 0
    t0 = time.perf_counter()
    while n < a.rows:
        model.fn(x)
        n += len(x)
    return {"rows": n, "seconds": time.perf_counter() - t0}


def contender_pipeline(a: argparse.Namespace) -> dict[str, Any]:
    """The scorer's own work without Kafka: decode + score + encode (the scoring core)."""
    from headrace.scorers.engine.core import ScoringCore
    from headrace.scorers.engine.models import load_model
    from headrace.streams import headers as hdr
    from headrace.streams.consuming import RawBatch

    model = load_model(root=Path(a.dfs), name=MODEL, alias="production", device="cpu",
                       max_batch=8192)
    recs = make_records(8192 if not a.arrow else 16 * ARROW_ROWS)
    values = arrow_messages(recs) if a.arrow else recs
    ct = hdr.ARROW if a.arrow else hdr.JSON
    n = len(values)
    batch = RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.bench"] * n,
                     np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                     np.full(n, int(time.time() * 1000), np.int64),
                     [[("content-type", ct.encode())]] * n)
    core = ScoringCore()
    core.score(batch, model)
    rows, t0 = 0, time.perf_counter()
    while rows < a.rows:
        rows += core.score(batch, model).scored_rows
    return {"rows": rows, "seconds": time.perf_counter() - t0}


CONTENDERS = {"pipeline": contender_pipeline, "kafka-ml": contender_kafka_ml,
              "passthrough": contender_passthrough,
              "headrace-json": contender_headrace, "headrace-arrow": contender_headrace,
              "model-alone": contender_model}


def child_main(a: argparse.Namespace) -> None:
    result = CONTENDERS[a.contender](a)
    result["rss_mib"] = _rss_mib() + result.pop("extra_rss_mib", 0.0)
    print("RESULT " + json.dumps(result), flush=True)


# -- parent ------------------------------------------------------------------------------------
def child_result(script: str, name: str, *, during: Any = None, timeout_s: float = 600,
                 **kw: Any) -> tuple[dict[str, Any] | None, int]:
    """Run ``script --contender name --k v ...`` (True flags bare, None left out); ``during``
    starts in a thread once the child prints READY. Its last ``RESULT {json}`` line, and exit."""
    args = [sys.executable, script, "--contender", name]
    for k, v in kw.items():
        if isinstance(v, bool):
            if v:
                args.append(f"--{k.replace('_', '-')}")
        elif v is not None:
            args += [f"--{k.replace('_', '-')}", str(v)]
    err = None if os.environ.get("BENCH_DEBUG") else subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    result: dict[str, Any] | None = None
    for line in proc.stdout:
        if line.startswith("READY") and during is not None:
            threading.Thread(target=during, daemon=True).start()
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    proc.wait(timeout_s)
    return result, proc.returncode


def run_child(name: str, *, during: Any = None, **kw: Any) -> dict[str, Any]:
    result, code = child_result(__file__, name, during=during, **kw)
    if result is None:
        raise SystemExit(f"contender {name} failed (exit {code})")
    return result


class Arrivals:
    """A ``read_committed`` reader of a paced run's output while it runs: when each key became
    readable downstream (wall-clock ms, the producers' clock too). A transactional prediction's
    CreateTime is stamped at produce, before the commit that makes it visible."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import TopicPartition

        from headrace.streams.clients import make_consumer

        self.consumer = make_consumer(_conn(bootstrap), f"bench-visible-{uuid.uuid4().hex}",
                                      **{"fetch.wait.max.ms": 5})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.seen: dict[bytes, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # A short wait: consume() returns at its timeout unless the batch fills.
            for m in self.consumer.consume(num_messages=10_000, timeout=0.005):
                if m.error() is None and m.key() not in self.seen:
                    self.seen[m.key()] = time.time() * 1000.0

    def stop(self, expect: int, timeout_s: float = 60.0) -> dict[bytes, float]:
        deadline = time.monotonic() + timeout_s
        while len(self.seen) < expect and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        return dict(self.seen)


def latencies(bootstrap: str, input_topic: str, output_topic: str, n_msgs: int,
              *, measured_prefix: str, arrivals: Arrivals | None = None
              ) -> tuple[float, float]:
    """p50/p99 ms of the measured keys (warm-up keys are left out): to the output's CreateTime,
    or with ``arrivals`` to when a ``read_committed`` reader got it."""
    ins = read_timestamps(bootstrap, input_topic, n_msgs)
    outs = (arrivals.stop(n_msgs) if arrivals is not None
            else read_timestamps(bootstrap, output_topic, n_msgs))
    pre = measured_prefix.encode()
    lat = np.asarray([outs[k] - ins[k] for k in outs if k in ins and k.startswith(pre)],
                     np.float64)
    if not len(lat):
        return float("nan"), float("nan")
    return float(np.percentile(lat, 50)), float(np.percentile(lat, 99))


def paced_run(contender: str, values: list[bytes], content_type: str, rows_per_msg: int,
              rate: float, stream_topics: Any, **kw: Any) -> tuple[float, float]:
    """Offer ``rate`` rows/s: one second of warm-up messages (keys ``w…``), then the measured
    ones (keys ``m…``); latency is taken over the measured ones only. In a transactional run it
    is taken to when a ``read_committed`` reader got each prediction (the commit included)."""
    bootstrap = kw["bootstrap"]
    s, i, o = stream_topics("p")
    arrivals = Arrivals(bootstrap, o) if kw.get("transactional") else None
    warm = values[:max(1, int(rate / rows_per_msg))]

    def send() -> None:
        paced_send(bootstrap, i, [("w", warm), ("m", values)],
                   [("content-type", content_type.encode())], rate / rows_per_msg,
                   idempotent=bool(kw.get("idempotent")))

    rows = (len(warm) + len(values)) * rows_per_msg
    if contender == "passthrough":
        run_child(contender, input=i, output=o, rows=rows, during=send, **kw)
    else:
        run_child(contender, stream=s, rows=rows, during=send, **kw)
    return latencies(bootstrap, i, o, len(warm) + len(values), measured_prefix="m",
                     arrivals=arrivals)


@contextmanager
def broker_of(kind: str, a: argparse.Namespace) -> Iterator[str]:
    """Bootstrap servers of the run's broker: ``--bootstrap`` when given, else an embedded
    Tansu or an Apache Kafka KRaft cluster started here (tools/kafka_cluster.py) and stopped
    after."""
    if a.bootstrap:
        yield a.bootstrap
        return
    if kind == "kafka":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's tools
        from tools.kafka_cluster import KafkaCluster

        cluster = KafkaCluster(brokers=a.kafka_brokers).start()
        try:
            yield cluster.bootstrap
        finally:
            cluster.stop()
        return
    from headrace.streams.broker import EmbeddedBroker

    broker = EmbeddedBroker().start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def brokers_of(a: argparse.Namespace) -> list[str]:
    return ["tansu", "kafka"] if a.broker == "both" else [a.broker]


def parent_main(a: argparse.Namespace) -> None:
    """Every contender on each broker ``--broker`` names. With both, both brokers are up and
    each contender runs on Tansu then on Kafka back to back, so the machine's drift (large on
    a shared box) falls between contenders, not between the brokers."""
    kinds = brokers_of(a)
    with ExitStack() as stack:
        bootstraps = {k: stack.enter_context(broker_of(k, a)) for k in kinds}
        for k in kinds:
            print(f"{broker_name(k, a)}: {bootstraps[k]}", flush=True)
        runs = series(a, bootstraps)
    for k in kinds:
        print(f"\n== {broker_name(k, a)}")
        report(*runs[k], 60 if a.quick else 300)
    if len(runs) == 2:
        side_by_side(runs, a)


def broker_name(kind: str, a: argparse.Namespace) -> str:
    if a.bootstrap:
        return f"the Kafka at {a.bootstrap}"
    if kind == "kafka":
        return f"Apache Kafka (KRaft, {a.kafka_brokers} node{'s' if a.kafka_brokers > 1 else ''})"
    return "embedded Tansu"


def side_by_side(runs: dict[str, tuple[dict[str, dict[str, Any]],
                                       dict[str, tuple[float, float]]]],
                 a: argparse.Namespace) -> None:
    """The same contenders on both brokers: rows/s and p50/p99, Kafka / Tansu."""
    (tr, tp), (kr, kp) = runs["tansu"], runs["kafka"]
    print()
    print(f"Apache Kafka ({a.kafka_brokers} node(s)) beside embedded Tansu, one run:")
    print(f"{'contender':34} {'Tansu rows/s':>13} {'Kafka rows/s':>13} {'Kafka/Tansu':>12}")
    for k in tr:
        t = tr[k]["rows"] / max(tr[k]["seconds"], 1e-9)
        q = kr[k]["rows"] / max(kr[k]["seconds"], 1e-9)
        print(f"{k:34} {t:>13,.0f} {q:>13,.0f} {q / t:>12.2f}")
    print(f"{'latency at 10 000 rows/s':34} {'Tansu p50/p99':>13} {'Kafka p50/p99':>13} "
          f"{'p99 K/T':>12}")
    for k in tp:
        (t50, t99), (k50, k99) = tp[k], kp[k]
        print(f"{k:34} {t50:>6.1f}/{t99:<6.1f} {k50:>6.1f}/{k99:<6.1f} "
              f"{k99 / max(t99, 1e-9):>12.2f}")


Run = tuple[dict[str, dict[str, Any]], dict[str, tuple[float, float]]]


def series(a: argparse.Namespace, bootstraps: dict[str, str]) -> dict[str, Run]:
    """Every contender on each broker (name: bootstrap), one contender at a time on all of
    them: throughputs and paced latencies per broker."""
    from headrace.streams import headers as hdr
    from headrace.streams.topics import data_topic, predictions_topic

    q = a.quick
    n_json = 200_000 if q else 600_000
    n_arrow = 600 * ARROW_ROWS if q else 1500 * ARROW_ROWS
    n_kml = 60 if q else 300
    n_paced = 30_000 if q else 100_000
    dfs = Path(tempfile.mkdtemp(prefix="bench-dfs-"))
    profile = ("transactional" if a.transactional else "idempotent" if a.idempotent
               else "non-idempotent (one request in flight)")
    print(f"cpus {os.cpu_count()}; prediction producer {profile}; "
          "generating records…", flush=True)
    publish_model(dfs)
    records = make_records(max(n_json, n_arrow, n_paced))
    arrow = arrow_messages(records[:n_arrow])
    paced_arrow = arrow_messages_sized(records[:n_paced], 100)
    runs: dict[str, Run] = {k: ({}, {}) for k in bootstraps}

    def each(name: str, step: Any, paced: bool = False) -> None:
        for k, bootstrap in bootstraps.items():
            common = {"bootstrap": bootstrap, "dfs": str(dfs), "idempotent": a.idempotent,
                      "transactional": a.transactional}

            def stream_topics(tag: str, bootstrap: str = bootstrap) -> tuple[str, str, str]:
                s = f"b{tag}{uuid.uuid4().hex[:8]}"
                ensure(bootstrap, data_topic(s), predictions_topic(s), f"data.{s}.dlq")
                return s, data_topic(s), predictions_topic(s)

            got = step(bootstrap, stream_topics, common)
            runs[k][1 if paced else 0][name] = got
            print(f"{name} on {k}: {_line(got, paced)}", flush=True)

    def preloaded(contender: str, values: list[bytes], content_type: str, rows: int,
                  key_prefix: str = "k", **kw: Any) -> Any:
        def step(bootstrap: str, topics: Any, common: dict[str, Any]) -> dict[str, Any]:
            s, i, o = topics(contender[:1])
            load_topic(bootstrap, i, values, content_type, key_prefix=key_prefix)
            if contender in ("kafka-ml", "passthrough"):
                return run_child(contender, input=i, output=o, rows=rows, **kw, **common)
            return run_child(contender, stream=s, rows=rows, **kw, **common)
        return step

    each("a kafka-ml loop", preloaded("kafka-ml", records[:n_kml], hdr.JSON, n_kml))
    each("b pass-through (JSON)", preloaded("passthrough", records[:n_json], hdr.JSON, n_json))
    each("b pass-through (Arrow)", preloaded("passthrough", arrow, hdr.ARROW, n_arrow, "b",
                                             arrow=True, rows_per_msg=ARROW_ROWS))
    each("c headrace JSON", preloaded("headrace-json", records[:n_json], hdr.JSON, n_json,
                                      batch_size=8192, max_wait_ms=10))
    each("d headrace Arrow", preloaded("headrace-arrow", arrow, hdr.ARROW, n_arrow, "b",
                                       batch_size=65536, max_wait_ms=10))
    # No Kafka: the same on every broker, which shows how much the machine drifted.
    each("e model alone (batch 8192)",
         lambda b, t, common: run_child("model-alone", rows=n_arrow, batch_size=8192, **common))
    each("f scorer work, no Kafka (JSON)",
         lambda b, t, common: run_child("pipeline", rows=n_json // 2, **common))
    each("f scorer work, no Kafka (Arrow)",
         lambda b, t, common: run_child("pipeline", rows=n_arrow, arrow=True, **common))

    # latency runs at an offered 10 000 rows/s
    rate = 10_000.0
    each("b pass-through (JSON)", lambda b, t, common: paced_run(
        "passthrough", records[:n_paced], hdr.JSON, 1, rate, t, **common), paced=True)
    each("c headrace JSON", lambda b, t, common: paced_run(
        "headrace-json", records[:n_paced], hdr.JSON, 1, rate, t, batch_size=8192,
        max_wait_ms=5, **common), paced=True)
    each("d headrace Arrow (100 rows/msg)", lambda b, t, common: paced_run(
        "headrace-arrow", paced_arrow, hdr.ARROW, 100, rate, t, batch_size=8192,
        max_wait_ms=5, **common), paced=True)
    return runs


def _line(got: Any, paced: bool) -> str:
    if paced:
        return f"p50/p99 {got[0]:.1f}/{got[1]:.1f} ms"
    return f"{got['rows'] / max(got['seconds'], 1e-9):,.0f} rows/s"


def shadow_main(a: argparse.Namespace) -> None:
    """The shadow contender: the real scorer with and without a shadow candidate (a second
    version of the same MLP), side by side: rows/s on a preloaded topic and the added p99 at
    an offered 10 000 rows/s, JSON and Arrow; on each broker ``--broker`` names."""
    for kind in brokers_of(a):
        with broker_of(kind, a) as bootstrap:
            print(f"== {broker_name(kind, a)}", flush=True)
            shadow_series(a, bootstrap)


def shadow_series(a: argparse.Namespace, bootstrap: str) -> None:
    from headrace.streams import headers as hdr
    from headrace.streams.topics import data_topic, predictions_topic, shadow_topic

    q = a.quick
    n_json = 200_000 if q else 600_000
    n_arrow = 600 * ARROW_ROWS if q else 1500 * ARROW_ROWS
    n_paced = 30_000 if q else 100_000
    dfs = Path(tempfile.mkdtemp(prefix="bench-dfs-"))
    print(f"broker {bootstrap}; cpus {os.cpu_count()}; shadow on vs off", flush=True)
    publish_model(dfs)
    records = make_records(max(n_json, n_arrow, n_paced))
    arrow = arrow_messages(records[:n_arrow])

    def stream_topics(tag: str) -> tuple[str, str, str]:
        s = f"b{tag}{uuid.uuid4().hex[:8]}"
        ensure(bootstrap, data_topic(s), predictions_topic(s), f"data.{s}.dlq",
               shadow_topic(s))
        return s, data_topic(s), predictions_topic(s)

    common = {"bootstrap": bootstrap, "dfs": str(dfs), "idempotent": a.idempotent}
    rates: dict[str, float] = {}
    paced: dict[str, tuple[float, float]] = {}

    cpu: dict[str, float] = {}  # machine CPU seconds per row, the least of the rounds

    def keep(table: dict[str, float], key: str, value: float, higher: bool = True) -> None:
        old = table.get(key)
        table[key] = value if old is None or (value > old) == higher else old

    # Off, on, off, on: the best of each, so a burst of other load on a shared machine
    # penalises neither side alone.
    for shadow in (False, True) * a.repeat:
        tag = "on" if shadow else "off"
        s, i, _ = stream_topics("c")
        load_topic(bootstrap, i, records[:n_json], hdr.JSON)
        r = run_child("headrace-json", stream=s, rows=n_json, batch_size=8192,
                      max_wait_ms=10, shadow=shadow, **common)
        keep(rates, f"JSON {tag}", r["rows"] / r["seconds"])
        keep(cpu, f"JSON {tag}", r["busy_s"] / r["rows"], higher=False)
        print(f"JSON shadow {tag}: {r['rows'] / r['seconds']:,.0f} rows/s; the candidate "
              f"predicted {r['shadow_rows']:,.0f} rows, dropped {r['shadow_dropped']:,.0f}; "
              f"{_cpu_line(r)}", flush=True)
        s, i, _ = stream_topics("d")
        load_topic(bootstrap, i, arrow, hdr.ARROW, key_prefix="b")
        r = run_child("headrace-arrow", stream=s, rows=n_arrow, batch_size=65536,
                      max_wait_ms=10, shadow=shadow, **common)
        keep(rates, f"Arrow {tag}", r["rows"] / r["seconds"])
        keep(cpu, f"Arrow {tag}", r["busy_s"] / r["rows"], higher=False)
        print(f"Arrow shadow {tag}: {r['rows'] / r['seconds']:,.0f} rows/s; the candidate "
              f"predicted {r['shadow_rows']:,.0f} rows, dropped {r['shadow_dropped']:,.0f}; "
              f"{_cpu_line(r)}", flush=True)
        for kind, values, per in (
                ("JSON", records[:n_paced], 1),
                ("Arrow", arrow_messages_sized(records[:n_paced], 100), 100)):
            got = paced_run(f"headrace-{kind.lower()}", values,
                            hdr.JSON if per == 1 else hdr.ARROW, per, 10_000.0,
                            stream_topics, batch_size=8192, max_wait_ms=5, shadow=shadow,
                            **common)
            print(f"{kind} shadow {tag}: p50/p99 {got[0]:.1f}/{got[1]:.1f} ms", flush=True)
            old = paced.get(f"{kind} {tag}")
            paced[f"{kind} {tag}"] = got if old is None or got[1] < old[1] else old
    print()
    print(f"{'shadow':10} {'JSON rows/s':>12} {'Arrow rows/s':>13} {'JSON p50/p99 ms':>16} "
          f"{'Arrow p50/p99 ms':>17}")
    for tag in ("off", "on"):
        jp, ap = paced[f"JSON {tag}"], paced[f"Arrow {tag}"]
        print(f"{tag:10} {rates[f'JSON {tag}']:>12,.0f} {rates[f'Arrow {tag}']:>13,.0f} "
              f"{jp[0]:>7.1f}/{jp[1]:<8.1f} {ap[0]:>8.1f}/{ap[1]:<8.1f}")
    print()
    for kind, goal in (("JSON", 0.85), ("Arrow", 0.6)):
        ratio = rates[f"{kind} on"] / rates[f"{kind} off"]
        added = paced[f"{kind} on"][1] - paced[f"{kind} off"][1]
        print(f"{kind:5}: shadow on / off = {ratio:.2f} (goal >= {goal}); added p99 at "
              f"10 000 rows/s = {added:+.1f} ms (goal <= 5 ms)")
        # With every core busy, no overlap can beat the ratio of the CPU each row costs.
        off, on = cpu[f"{kind} off"], cpu[f"{kind} on"]
        print(f"{kind:5}: machine CPU per row off {off * 1e6:.2f} us, on {on * 1e6:.2f} us; "
              f"where the cores are saturated, on / off cannot pass {off / on:.2f}")


def _cpu_line(r: dict[str, Any]) -> str:
    """The machine's CPU over the run: per row, and how busy its cores were."""
    cores = os.cpu_count() or 1
    return (f"machine CPU {r['busy_s'] / r['rows'] * 1e6:.2f} us/row, cores "
            f"{r['busy_s'] / (r['seconds'] * cores):.0%} busy")


def arrow_messages_sized(records: list[bytes], rows: int) -> list[bytes]:
    global ARROW_ROWS
    saved, ARROW_ROWS = ARROW_ROWS, rows
    try:
        return arrow_messages(records)
    finally:
        ARROW_ROWS = saved


def report(results: dict[str, dict[str, Any]], paced: dict[str, tuple[float, float]],
           n_kml: int) -> None:
    rate = {k: v["rows"] / max(v["seconds"], 1e-9) for k, v in results.items()}
    base = rate["a kafka-ml loop"]
    ceiling_json = rate["b pass-through (JSON)"]
    ceiling_arrow = rate["b pass-through (Arrow)"]
    print()
    print(f"{'contender':34} {'rows':>9} {'rows/s':>12} {'x kafka-ml':>11} {'peak RSS MiB':>13}")
    for k, v in results.items():
        print(f"{k:34} {v['rows']:>9} {rate[k]:>12,.0f} {rate[k] / base:>11,.0f} "
              f"{v['rss_mib']:>13,.0f}")
    print()
    print(f"(a) measured over {n_kml} records and extrapolated as a steady rate: its loop has "
          "no batching, so rows/s does not grow with the record count.")
    print(f"headrace JSON  / pass-through JSON  = {rate['c headrace JSON'] / ceiling_json:.2f}")
    print(f"headrace Arrow / pass-through Arrow = {rate['d headrace Arrow'] / ceiling_arrow:.2f}")
    print(f"headrace JSON  / kafka-ml = {rate['c headrace JSON'] / base:,.0f}x;  "
          f"headrace Arrow / kafka-ml = {rate['d headrace Arrow'] / base:,.0f}x")
    print()
    print("latency at an offered 10 000 rows/s (input CreateTime -> output CreateTime):")
    print(f"{'contender':34} {'p50 ms':>8} {'p99 ms':>8}")
    for k, (p50, p99) in paced.items():
        print(f"{k:34} {p50:>8.1f} {p99:>8.1f}")
    print("(a) kafka-ml cannot sustain 10 000 rows/s (its queue grows without bound).")


def gpu_resnet(a: argparse.Namespace) -> None:
    """ResNet-50 (random weights) images/s: batched vs per image. Skipped without a GPU."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        print("GPU ResNet-50 variant: skipped (no GPU)")
        return
    import keras

    model = keras.applications.ResNet50(weights=None)
    f = tf.function(lambda x: model(x, training=False),
                    input_signature=[tf.TensorSpec([None, 224, 224, 3], tf.float32)])
    for batch in (1, 64):
        x = tf.random.uniform((batch, 224, 224, 3))
        f(x)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 5:
            f(x).numpy()
            n += batch
        print(f"ResNet-50 batch {batch:>3}: {n / (time.perf_counter() - t0):,.0f} images/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run")
    p.add_argument("--bootstrap", default=None,
                   help="a Kafka to use (default: the broker --broker starts)")
    p.add_argument("--broker", choices=("tansu", "kafka", "both"), default="tansu",
                   help="start an embedded Tansu, an Apache Kafka KRaft cluster "
                        "(tools/kafka_cluster.py; needs Java and the cached jars), or both "
                        "one after the other and report them side by side (Kafka / Tansu)")
    p.add_argument("--kafka-brokers", type=int, default=1,
                   help="nodes of the Apache Kafka cluster (default 1: beside one Tansu)")
    p.add_argument("--gpu", action="store_true", help="also run the GPU ResNet-50 variant")
    p.add_argument("--contender", default=None, help=argparse.SUPPRESS)
    for opt in ("input", "output", "stream", "dfs"):
        p.add_argument(f"--{opt}", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=8192, help=argparse.SUPPRESS)
    p.add_argument("--max-wait-ms", type=int, default=10, help=argparse.SUPPRESS)
    p.add_argument("--arrow", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rows-per-msg", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--shadow", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shadow-only", action="store_true",
                   help="only the shadow contender: Headrace with a shadow candidate on vs "
                        "off (rows/s, and p99 at 10 000 rows/s), JSON and Arrow")
    p.add_argument("--repeat", type=int, default=2,
                   help="with --shadow-only: off/on rounds (the best of each is reported)")
    p.add_argument("--idempotent", action="store_true",
                   help="idempotent producers for pass-through and Headrace (the scorer's "
                        "default); without it both run the non-idempotent profile")
    p.add_argument("--transactional", action="store_true",
                   help="Headrace scores exactly-once (a transaction a batch: "
                        "HEADRACE_SCORER_TRANSACTIONAL); pass-through and the upstream run "
                        "idempotent")
    a = p.parse_args()
    a.idempotent = a.idempotent or a.transactional
    if a.contender:
        child_main(a)
    elif a.shadow_only:
        shadow_main(a)
    else:
        parent_main(a)
        if a.gpu:
            gpu_resnet(a)


if __name__ == "__main__":
    main()
