"""JSON decoded ahead by helper processes: same rows, same dead letters, nothing lost on a crash."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from headrace.core.settings import Settings
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import ModelHolder, load_model
from headrace.scorers.engine.stream_io import RawBatch, StreamIO
from headrace.scorers.engine.worker import Worker
from headrace.scorers.wire.decode_pool import DecodePool
from headrace.scorers.wire.json_rows import decode_rows
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.consuming import BatchConsumer
from headrace.streams.topics import catalog, dlq_topic, predictions_topic
from tests.scorers.conftest import (
    FEATURES,
    eventually,
    publish_tf,
    read_topic,
    ready_scorer,
    rows,
    send_json,
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
    with ready_scorer(settings, conn, batch_size=1024, max_wait_ms=200) as scorer:
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
    with ready_scorer(settings, conn, batch_size=1024, max_wait_ms=200) as scorer:
        assert scorer.worker is not None and scorer.worker.decoders is not None
        keys = send_json(conn, data, rows(1500, seed=2))
        read_topic(conn, predictions_topic(stream), expect=1500)
        pids = scorer.worker.decoders.pids
        assert pids, "the helpers were started"
        os.kill(pids[0], signal.SIGKILL)
        keys += send_json(conn, data, rows(1500, seed=3), key_prefix="after")
        preds = read_topic(conn, predictions_topic(stream), expect=3000)
        reg = scorer.metrics.registry
        eventually(lambda: (reg.get_sample_value(
            "headrace_scorer_retries_total", {"stream": stream, "what": "decode_helper"})
            or 0) >= 1, timeout_s=10, what="the helper failure to be counted")
    assert sorted(json.loads(m.value())["key"] for m in preds) == sorted(keys)


def _worker(conn: KafkaConnection, dfs: Path, topic: str, out: str) -> Worker:
    holder = ModelHolder()
    holder.swap(load_model(root=dfs, name="m", alias="production", device="cpu",
                           max_batch=1024))
    io = StreamIO(conn, BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic],
                                      partitions=[0]), idempotent=False)
    return Worker(io=io, holder=holder, metrics=ScorerMetrics(stream="s", model="m"),
                  predictions_topic=out, dlq_topic=out + ".dlq", batch_size=1000,
                  max_wait_s=2.0, grace_s=5.0, transactional=False, stop=threading.Event(),
                  decoders=DecodePool(1))


def _next_batch(w: Worker) -> RawBatch:
    """The next non-empty batch (the first fetch takes a moment)."""
    for _ in range(100):
        if len(batch := w.batcher.next_batch(w.stop)):
            return batch
    raise AssertionError("no batch within 10 s")


def _offsets(conn: KafkaConnection, topic: str, expect: int) -> list[int]:
    return sorted(json.loads(m.value())["source_offset"]
                  for m in read_topic(conn, topic, expect=expect, settle_s=1.0))


def test_a_batch_decoded_ahead_is_dropped_when_the_consumer_rewinds(
        conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str]) -> None:
    """The consumer rewound (an aborted transaction, a lost commit) while batch k+1 was being
    decoded: k+1 is read again from the committed offset, so scoring it now would publish
    ahead of the redo (and, in a transaction, commit past it)."""
    publish_tf(dfs, "m")
    topic, out = topic_factory(), topic_factory()
    send_json(conn, topic, rows(2000, seed=4))
    w = _worker(conn, dfs, topic, out)
    try:
        w.io.commit({(topic, 0): 0})
        first = _next_batch(w)
        assert len(first) == 1000 and w._decode_ahead(first)
        w.io.rewind_to_committed()  # as an abort does
        w._finish_ahead(RawBatch.empty())
        assert w._pending is None  # nothing of the stale batch was published
        again = _next_batch(w)  # the consumer reads it again, from offset 0
        assert again.offsets.tolist() == first.offsets.tolist()
        w.handle(again)
        w.complete_pending()
    finally:
        w.decoders.close()  # type: ignore[union-attr]
        w.io.close(timeout_s=2)
    assert _offsets(conn, out, 1000) == list(range(1000))  # once each: nothing twice


def test_a_batch_decoded_ahead_is_decoded_again_for_a_model_with_other_features(
        conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str]) -> None:
    publish_tf(dfs, "m")
    topic, out = topic_factory(), topic_factory()
    # Every record holds a, b, c, d and e; the swapped-in model reads b, c, d, e.
    send_json(conn, topic, rows(1000, seed=5, features=(*FEATURES, "e")))
    w = _worker(conn, dfs, topic, out)
    try:
        batch = _next_batch(w)
        assert len(batch) == 1000 and w._decode_ahead(batch)
        publish_tf(dfs, "m", features=("b", "c", "d", "e"))
        w.holder.swap(load_model(root=dfs, name="m", alias="production", device="cpu",
                                 max_batch=1024))
        w._finish_ahead(RawBatch.empty())
        w.complete_pending()
    finally:
        w.decoders.close()  # type: ignore[union-attr]
        w.io.close(timeout_s=2)
    preds = read_topic(conn, out, expect=1000, settle_s=1.0)
    assert {json.loads(m.value())["model_version"] for m in preds} == {2}
    assert sorted(json.loads(m.value())["source_offset"] for m in preds) == list(range(1000))
    # Scored on the new features: the same as scoring b..e directly.
    first = next(m for m in preds if json.loads(m.value())["source_offset"] == 0)
    model = w.holder.current
    assert model is not None and model.features == ("b", "c", "d", "e")
    x = np.asarray([[rows(1000, seed=5, features=(*FEATURES, "e"))[0][f] for f in model.features]],
                   np.float32)
    expect = np.asarray(model.fn(x), np.float32)[0]
    assert np.allclose(json.loads(first.value())["scores"], expect, atol=1e-6)
