from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from headrace.contracts import Prediction, parse
from headrace.core.settings import Settings
from headrace.store.versions import ModelVersion
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import catalog, predictions_topic
from tests.scorers.conftest import (
    CLASSES,
    predictions,
    publish_mx,
    publish_tf,
    read_topic,
    ready_scorer,
    rows,
    score,
    send_json,
)


def _score_json(settings: Settings, conn: KafkaConnection, dfs: Path, data: str, n: int, *,
                publish: Callable[[Path, str], ModelVersion] = publish_tf, **scorer: Any,
                ) -> tuple[ModelVersion, list[str], list[Any]]:
    """Publish a model, send ``n`` JSON rows, score them: (model version, keys, predictions)."""
    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings))
    mv = publish(dfs, stream)
    keys = send_json(conn, data, rows(n))
    msgs, _ = score(settings, conn, expect=n, **scorer)
    return mv, keys, msgs


def test_every_json_row_gets_one_prediction_keyed_like_its_input(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    stream = settings.streams[0]
    mv, keys, msgs = _score_json(settings, conn, dfs, data, 2000)
    preds = predictions(msgs)
    assert len(preds) == 2000
    assert sorted(p["key"] for p in preds) == sorted(keys)
    assert all(m.key().decode() == p["key"] for m, p in zip(msgs, preds, strict=True))
    assert len({(p["source_partition"], p["source_offset"]) for p in preds}) == 2000
    for m in msgs[:50]:
        pred = parse(Prediction, m.value())  # the contract parses what we built vectorised
        assert pred.model_version == mv.version and pred.model_name == stream
        assert pred.source_topic == data and len(pred.scores) == len(CLASSES)
        assert abs(sum(pred.scores) - 1.0) < 1e-4
        assert pred.label == CLASSES[max(range(2), key=lambda i: pred.scores[i])]
        assert hdr.get(m.headers(), hdr.SCHEMA) == "headrace.Prediction"
        assert hdr.get(m.headers(), hdr.CONTENT_TYPE) == hdr.JSON


def test_mxnet_model_scores_the_same_contract(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    mv, keys, msgs = _score_json(settings, conn, dfs, data, 500, publish=publish_mx)
    preds = predictions(msgs)
    assert sorted(p["key"] for p in preds) == sorted(keys)
    assert {p["model_version"] for p in preds} == {mv.version}
    assert all(abs(sum(p["scores"]) - 1) < 1e-4 for p in preds)


def test_transactional_mode_publishes_and_commits_offsets_in_the_transaction(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    from confluent_kafka import TopicPartition

    from headrace.streams.clients import make_consumer
    from headrace.streams.topics import scorer_group

    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings))
    publish_tf(dfs, stream)
    keys = send_json(conn, data, rows(1500))
    with ready_scorer(settings, conn, transactional=True) as scorer:
        msgs = read_topic(conn, predictions_topic(stream), expect=1500)
        assert scorer.metrics.commits._value.get() >= 1
    preds = predictions(msgs)
    assert sorted(p["key"] for p in preds) == sorted(keys)
    c = make_consumer(conn, scorer_group(stream))
    try:
        committed = c.committed([TopicPartition(data, p) for p in range(3)], timeout=10)
    finally:
        c.close()
    per_partition = {p: 0 for p in range(3)}
    for p in preds:
        per_partition[p["source_partition"]] += 1
    assert {tp.partition: tp.offset for tp in committed} == per_partition


def test_non_idempotent_producer_predicts_every_row_once_in_partition_order(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    _, keys, msgs = _score_json(settings, conn, dfs, data, 1500, idempotent=False)
    preds = predictions(msgs)
    assert sorted(p["key"] for p in preds) == sorted(keys)
    assert len({(p["source_partition"], p["source_offset"]) for p in preds}) == 1500
    # Within each predictions partition, each source partition's offsets only go up.
    seen: dict[tuple[int, int], int] = {}
    for m, p in zip(msgs, preds, strict=True):
        where = (m.partition(), p["source_partition"])
        assert p["source_offset"] > seen.get(where, -1)
        seen[where] = p["source_offset"]
