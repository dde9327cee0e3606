"""Re-score a range with a chosen model version: predictions only in the side topic, nothing
in predictions.<stream>, no commits in the scorer group."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.contracts import Framework, Prediction, Task, parse
from headrace.core.settings import Settings
from headrace.ops import replaying
from headrace.store import versions
from headrace.store.manifest import Manifest
from headrace.streams.clients import KafkaConnection, ensure_topics, make_consumer, make_producer
from headrace.streams.topics import catalog, data_topic, predictions_topic, scorer_group
from tests.fixtures import read_all


def _publish_tf(root: Path) -> versions.ModelVersion:
    import keras
    import numpy as np

    def files(d: Path) -> None:
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="softmax")])
        model.layers[0].set_weights([np.array([[1, 0, -1], [0, 1, -1]], "float32"),
                                     np.zeros(3, "float32")])
        model.save(d / "model.keras")

    return versions.publish(root, Manifest(
        name="rescore", framework=Framework.TENSORFLOW, task=Task.CLASSIFIER,
        features=("f0", "f1"), label="label", classes=("a", "b", "c")), files)


@pytest.mark.slow
def test_rescore_writes_the_chosen_versions_predictions_only_to_the_side_topic(
    conn: KafkaConnection, settings: Settings, topic_factory: Callable[..., str],
) -> None:
    ensure_topics(conn, catalog(settings))
    stream = settings.streams[0]
    mv = _publish_tf(settings.dfs_root)
    _publish_tf(settings.dfs_root)  # a newer version exists; the chosen one must be used
    p = make_producer(conn)
    for i in range(30):
        p.produce(data_topic(stream), json.dumps({"f0": i % 5, "f1": 4 - i % 5}).encode(),
                  key=b"k%d" % i, partition=i % 3, headers=[("content-type", b"application/json")])
    p.flush(10)
    side = topic_factory(partitions=3)
    cp = replaying.plan(conn, source=data_topic(stream), into=side,
                        model=f"rescore:{mv.version}")
    result = replaying.run(conn, settings.dfs_root, cp)

    preds = [parse(Prediction, r.value or b"") for r in read_all(conn, side)]
    assert result.completed and len(preds) == 30
    assert {(q.model_name, q.model_version) for q in preds} == {("rescore", mv.version)}
    assert sorted((q.source_partition, q.source_offset) for q in preds) == sorted(
        (i % 3, i // 3) for i in range(30))
    assert read_all(conn, predictions_topic(stream)) == []
    c = make_consumer(conn, scorer_group(stream))
    from confluent_kafka import TopicPartition

    committed = c.committed([TopicPartition(data_topic(stream), p) for p in range(3)], timeout=10)
    c.close()
    assert all(tp.offset < 0 for tp in committed)
