"""Scorer test helpers: tiny real models in the store, a scorer on a thread, Kafka readers."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.core.settings import Settings
from headrace.scorers.serving import Scorer
from headrace.scorers.settings import load_scorer_settings
from headrace.store.manifest import Manifest
from headrace.store.versions import ModelVersion, publish, set_alias
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, make_consumer, make_producer
from headrace.streams.codecs import encode_arrow, encode_json
from headrace.streams.topics import data_topic

FEATURES = ("a", "b", "c", "d")
CLASSES = ("no", "yes")


def publish_tf(root: Path, name: str, *, seed: int = 0, classes: tuple[str, ...] = CLASSES,
               features: tuple[str, ...] = FEATURES, alias: bool = True) -> ModelVersion:
    import keras

    keras.utils.set_random_seed(seed)
    outputs = len(classes) or 1
    model = keras.Sequential([
        keras.Input((len(features),)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(outputs, activation="softmax" if classes else None),
    ])
    manifest = Manifest(name=name, framework="tensorflow",
                        task="classifier" if classes else "regressor",
                        features=features, label="y", classes=classes)
    mv = publish(root, manifest, lambda d: model.save(d / "model.keras"))
    if alias:
        set_alias(root, name, mv.version)
    return mv


def publish_mx(root: Path, name: str, *, seed: int = 0, classes: tuple[str, ...] = CLASSES,
               features: tuple[str, ...] = FEATURES, alias: bool = True) -> ModelVersion:
    import numpy

    if not hasattr(numpy, "bool"):
        numpy.bool = bool  # type: ignore[attr-defined]
    import mxnet as mx

    mx.random.seed(seed)

    class Net(mx.gluon.nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = mx.gluon.nn.Dense(8, activation="relu")
            self.out = mx.gluon.nn.Dense(len(classes))

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            return F.softmax(self.out(self.hidden(x)))

    net = Net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, len(features))))
    manifest = Manifest(name=name, framework="mxnet", task="classifier",
                        features=features, label="y", classes=classes)
    mv = publish(root, manifest, lambda d: net.export(str(d / "model"), epoch=0))
    if alias:
        set_alias(root, name, mv.version)
    return mv


def rows(n: int, *, seed: int = 1, features: tuple[str, ...] = FEATURES) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(features))).astype(np.float32)
    return [{f: float(v) for f, v in zip(features, r, strict=True)} for r in x]


def send_json(conn: KafkaConnection, topic: str, records: list[dict[str, Any]], *,
              key_prefix: str = "k", start: int = 0) -> list[str]:
    p = make_producer(conn)
    keys = []
    for i, r in enumerate(records, start):
        k = f"{key_prefix}{i}"
        keys.append(k)
        p.produce(topic, encode_json(r), k, headers=[(hdr.CONTENT_TYPE, hdr.JSON.encode())])
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(15) == 0
    return keys


def send_raw(conn: KafkaConnection, topic: str, values: list[bytes], *, key: str = "raw",
             content_type: str = hdr.JSON) -> None:
    p = make_producer(conn)
    for v in values:
        p.produce(topic, v, key, headers=[(hdr.CONTENT_TYPE, content_type.encode())])
    assert p.flush(15) == 0


def send_arrow(conn: KafkaConnection, topic: str, tables: list[pa.Table], *,
               key_prefix: str = "batch") -> None:
    p = make_producer(conn)
    for i, t in enumerate(tables):
        p.produce(topic, encode_arrow(t), f"{key_prefix}{i}",
                  headers=[(hdr.CONTENT_TYPE, hdr.ARROW.encode())])
    assert p.flush(15) == 0


def read_topic(conn: KafkaConnection, topic: str, *, expect: int, timeout_s: float = 30.0,
               settle_s: float = 0.5) -> list[Any]:
    """Every message a fresh consumer reads from the start, waiting until ``expect`` arrived
    (then ``settle_s`` more to catch extras)."""
    from confluent_kafka import TopicPartition

    c = make_consumer(conn, f"test-reader-{time.monotonic_ns()}")
    md = c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error() is None:
                    out.append(m)
            if len(out) >= expect and settle_until is None:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
    finally:
        c.close()
    return out


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(cond: Callable[[], bool], *, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def predictions(msgs: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in msgs]


@contextmanager
def scorer_thread(settings: Settings, conn: KafkaConnection, **overrides: Any) -> Iterator[Scorer]:
    stream = settings.streams[0]
    opts: dict[str, Any] = {"stream": stream, "http_port": 0, "http_host": "127.0.0.1",
                            "max_wait_ms": 20, "batch_size": 512, "model_poll_s": 30.0,
                            "device": "cpu", "partitions": "0,1,2", "grace_s": 10}
    opts.update(overrides)
    scorer = Scorer(settings, load_scorer_settings(**opts), conn=conn)
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            scorer.run(stop)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    assert scorer.probes_up.wait(30)
    try:
        yield scorer
    finally:
        stop.set()
        t.join(60)
        assert not t.is_alive(), "scorer did not stop"
    if errors:
        raise errors[0]


def wait_ready(scorer: Scorer, timeout_s: float = 60.0) -> None:
    wait_for(lambda: http_get(scorer.http_port, "/readyz")[0] == 200, timeout_s=timeout_s,
             what="/readyz")


@pytest.fixture
def data(settings: Settings) -> str:
    return data_topic(settings.streams[0])

