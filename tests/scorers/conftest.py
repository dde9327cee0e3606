"""Scorer test helpers: tiny real models in the store and record senders; the scorer harness,
the topic reader and the waits come from ``tests.fixtures`` (re-exported here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.core.settings import Settings
from headrace.store.manifest import Manifest
from headrace.store.versions import ModelVersion, publish, set_alias
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.codecs import encode_arrow, encode_json
from headrace.streams.topics import catalog, data_topic
from tests.fixtures import (
    eventually,
    http_get,
    read_topic,
    ready_scorer,
    score,
    scorer_thread,
    wait_ready,
)
from tests.scorers.signature_models import seeded_mxnet

__all__ = ["eventually", "http_get", "read_topic", "ready_scorer", "score", "scorer_thread",
           "wait_ready"]

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
    mx = seeded_mxnet(seed)

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


def predictions(msgs: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in msgs]


@pytest.fixture
def data(settings: Settings) -> str:
    return data_topic(settings.streams[0])


@pytest.fixture
def stream(settings: Settings, conn: KafkaConnection) -> str:
    """The test's stream, its topics created."""
    ensure_topics(conn, catalog(settings))
    return settings.streams[0]

