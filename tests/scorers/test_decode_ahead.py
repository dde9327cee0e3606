"""JSON decoded ahead by helper processes: same rows, same dead letters, nothing lost on a crash."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headrace.core.settings import Settings
from headrace.scorers.decode_pool import DecodePool
from headrace.scorers.json_rows import decode_rows
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.topics import catalog, dlq_topic, predictions_topic
from tests.scorers.conftest import (
    FEATURES,
    publish_tf,
    read_topic,
    rows,
    scorer_thread,
    send_json,
    wait_for,
    wait_ready,
)

POISON = [
    b"not json at all",
    b"null",
    b"",
    b'{"a": 1, "b": 2, "c": 3}',  # missing feature d
    b'{"a": "x", "b": 2, "c": 3, "d": 4}',  # non-numeric
    b'{"a": 1e999, "b": 2, "c": 3, "d": 4}',  # infinite
    b'{"a": 3.5e38, "b": 2, "c": 3, "d": 4}',  # beyond float32: infinite once cast
    b"\xff\xfe{}",
]


def _at(j: int) -> int:
    """Where poison record ``j`` sits among the values."""
    return j * 37 + 5


def _values(n: int) -> list[bytes]:
    good = [json.dumps({**r, "extra": "ignored"}).encode() for r in rows(n, seed=7)]
    for j, p in enumerate(POISON):
        good.insert(_at(j), p)
    return good


def test_helpers_decode_exactly_like_the_scorer() -> None:
    values = _values(2000)
    x, ok, errors = decode_rows(values, FEATURES)
    pool = DecodePool(2)
    try:
        for _ in range(2):  # the helpers serve one batch after another
            assert pool.submit(values, FEATURES)
            got = pool.result()
            assert got is not None
            assert got[0].dtype == np.float32 and got[0].tobytes() == x.tobytes()
            assert got[1].tolist() == ok.tolist()
            assert got[2] == errors
    finally:
        pool.close()
    # Every poison record but the float32 overflow fails to decode; that one decodes to inf
    # (and is dead-lettered later, as not finite).
    assert [i for i, _, _ in errors] == [_at(j) for j in (0, 1, 2, 3, 4, 5, 7)]
    assert len(ok) == len(values) - 7
    assert np.flatnonzero(~np.isfinite(x).all(axis=1)).tolist() == [ok.tolist().index(_at(6))]


def test_a_killed_helper_costs_one_inline_decode() -> None:
    values = _values(500)
    pool = DecodePool(1).start()
    try:
        pool._helpers[0].proc.kill()
        pool._helpers[0].proc.wait()
        assert pool.submit(values, FEATURES)  # queued: the writer finds the pipe broken
        assert pool.result() is None
        assert not pool._helpers  # stopped; not restarted before RESTART_AFTER_S
        assert pool.submit(values, FEATURES) is False
    finally:
        pool.close()


def test_scorer_decodes_ahead_and_dead_letters_the_same_poison(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings), replication_factor=1)
    publish_tf(dfs, stream)
    values = _values(3000)
    p = make_producer(conn)
    for i, v in enumerate(values):  # one partition, so the poison sits between good records
        p.produce(data, v, f"k{i}", partition=0, headers=[(hdr.CONTENT_TYPE, hdr.JSON.encode())])
    assert p.flush(15) == 0
    _, _, errors = decode_rows(values, FEATURES)
    with scorer_thread(settings, conn, batch_size=1024, max_wait_ms=200) as scorer:
        wait_ready(scorer)
        preds = read_topic(conn, predictions_topic(stream), expect=3000)
        dead = read_topic(conn, dlq_topic(stream), expect=len(POISON))
        reg = scorer.metrics.registry
        ahead = reg.get_sample_value("headrace_scorer_decoded_ahead_total", {"stream": stream})
    assert ahead is not None and ahead >= 1024  # the helpers did decode
    poison_keys = {f"k{_at(j)}" for j in range(len(POISON))}
    assert sorted(json.loads(m.value())["key"] for m in preds) == sorted(
        f"k{i}" for i in range(len(values)) if f"k{i}" not in poison_keys)
    assert sorted(m.key().decode() for m in dead) == sorted(poison_keys)
    reasons = {f"k{i}": (stage, reason) for i, stage, reason in errors}
    reasons[f"k{_at(6)}"] = ("validate", "feature 'a' is missing, null or not finite")
    for m in dead:  # the helper's reasons, word for word
        h = hdr.to_dict(m.headers())
        assert (h[dlq.DLQ_STAGE], h[dlq.DLQ_ERROR_MESSAGE]) == reasons[m.key().decode()]


def test_scorer_keeps_scoring_when_its_helper_dies(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings), replication_factor=1)
    publish_tf(dfs, stream)
    with scorer_thread(settings, conn, batch_size=1024, max_wait_ms=200) as scorer:
        wait_ready(scorer)
        assert scorer.worker is not None and scorer.worker.decoders is not None
        keys = send_json(conn, data, rows(1500, seed=2))
        read_topic(conn, predictions_topic(stream), expect=1500)
        helpers = scorer.worker.decoders._helpers
        assert helpers, "the helpers were started"
        helpers[0].proc.kill()
        keys += send_json(conn, data, rows(1500, seed=3), key_prefix="after")
        preds = read_topic(conn, predictions_topic(stream), expect=3000)
        reg = scorer.metrics.registry
        wait_for(lambda: (reg.get_sample_value(
            "headrace_scorer_retries_total", {"stream": stream, "what": "decode_helper"})
            or 0) >= 1, timeout_s=10, what="the helper failure to be counted")
    assert sorted(json.loads(m.value())["key"] for m in preds) == sorted(keys)
