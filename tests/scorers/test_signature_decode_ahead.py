"""Signature models decoded ahead (in a thread, while the batch before is in the model): the same
predictions and dead letters as decoding inline, dropped when the consumer rewinds, decoded
again after a swap to a model with other inputs."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import ModelHolder, load_model
from headrace.scorers.engine.stream_io import RawBatch, StreamIO
from headrace.scorers.engine.worker import Worker
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.consuming import BatchConsumer
from headrace.streams.topics import TopicSpec
from tests.scorers import signature_models as sm
from tests.scorers.conftest import read_topic

N = 30
BAD = {7: {"image": "bm90IGFuIGltYWdl"}, 19: {"picture": "x"}}  # undecodable; missing


def _records() -> list[dict[str, object]]:
    recs: list[dict[str, object]] = [
        {"image": base64.b64encode(sm.encode(img)).decode(), "age": float(i), "size": 2.0}
        for i, img in enumerate(sm.digits(N))]
    for i, rec in BAD.items():
        recs[i] = rec
    return recs


def _send(conn: KafkaConnection, topic: str) -> None:
    p = make_producer(conn)
    for i, rec in enumerate(_records()):
        p.produce(topic, json.dumps(rec).encode(), f"r{i}".encode(),
                  headers=[(hdr.CONTENT_TYPE, hdr.JSON.encode())])
    assert p.flush(15) == 0


def _worker(conn: KafkaConnection, dfs: Path, topic: str, out: str) -> Worker:
    holder = ModelHolder()
    holder.swap(load_model(root=dfs, name="m", alias="production", device="cpu", max_batch=64))
    io = StreamIO(conn, BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic],
                                      partitions=[0]), idempotent=False)
    return Worker(io=io, holder=holder, metrics=ScorerMetrics(stream="s", model="m"),
                  predictions_topic=out, dlq_topic=out + ".dlq", batch_size=N,
                  max_wait_s=2.0, grace_s=5.0, transactional=False, stop=threading.Event())


def _digits_worker(conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str]
                   ) -> tuple[Worker, str, str]:
    """A worker of the digits model over a fresh topic holding the N records (and BAD ones);
    the worker, its input topic and its output topic."""
    sm.tf_digits(dfs, "m")
    topic, out = topic_factory(), topic_factory()
    # The scorer's producer creates no topic (D42): the dead-letter topic exists, as a
    # stream's does.
    ensure_topics(conn, [TopicSpec(out + ".dlq", 1, "test")])
    _send(conn, topic)
    return _worker(conn, dfs, topic, out), topic, out


def _whole_batch(w: Worker) -> RawBatch:
    """All N records in one batch (the first fetch takes a moment)."""
    for _ in range(100):
        if len(batch := w.batcher.next_batch(w.stop)):
            assert len(batch) == N
            return batch
    raise AssertionError("no batch within 10 s")


def _reasons(msgs: list[Any]) -> dict[str, str]:
    return {m.key().decode(): hdr.get(m.headers(), dlq.DLQ_ERROR_MESSAGE) or "" for m in msgs}


def test_an_image_batch_decoded_ahead_gives_the_inline_predictions_and_dead_letters(
        conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str]) -> None:
    w, _topic, out = _digits_worker(conn, dfs, topic_factory)
    try:
        batch = _whole_batch(w)
        model = w.holder.current
        assert model is not None and not model.tabular
        inline = w.core.score(batch, model)  # what decoding on the scorer thread gives
        assert w._decode_ahead(batch) and w._ahead is not None
        assert w._ahead.inputs is not None  # in the decode thread, not the helpers
        w._finish_ahead(RawBatch.empty())
        w.complete_pending()
    finally:
        w.io.close(timeout_s=2)
    preds = read_topic(conn, out, expect=N - len(BAD), settle_s=1.0)
    dead = read_topic(conn, out + ".dlq", expect=len(BAD), settle_s=0.5)
    assert sorted(m.value() for m in preds) == sorted(inline.json_values)
    assert _reasons(dead) == {(letter.record.key or b"").decode():
                              hdr.get(letter.headers(), dlq.DLQ_ERROR_MESSAGE) or ""
                              for letter in inline.letters}
    assert set(_reasons(dead)) == {f"r{i}" for i in BAD}
    assert "input 'image': undecodable image" in _reasons(dead)["r7"]
    assert _reasons(dead)["r19"] == "input 'image' is missing"
    assert w.metrics.registry.get_sample_value("headrace_scorer_decoded_ahead_total",
                                               {"stream": "s"}) == N


def test_an_image_batch_decoded_ahead_is_dropped_when_the_consumer_rewinds(
        conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str]) -> None:
    w, topic, out = _digits_worker(conn, dfs, topic_factory)
    try:
        w.io.commit({(topic, 0): 0})
        first = _whole_batch(w)
        assert w._decode_ahead(first)
        w.io.rewind_to_committed()  # as an aborted transaction does
        w._finish_ahead(RawBatch.empty())
        assert w._pending is None  # nothing of the stale batch was published
        again = _whole_batch(w)
        assert again.offsets.tolist() == first.offsets.tolist()
        w.handle(again)
        w.complete_pending()
    finally:
        w.io.close(timeout_s=2)
    preds = read_topic(conn, out, expect=N - len(BAD), settle_s=1.0)
    offsets = sorted(json.loads(m.value())["source_offset"] for m in preds)
    assert offsets == sorted(set(range(N)) - set(BAD))  # once each: nothing twice


def test_an_image_batch_decoded_ahead_is_decoded_again_after_a_swap_to_other_inputs(
        conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str]) -> None:
    w, _topic, out = _digits_worker(conn, dfs, topic_factory)
    try:
        batch = _whole_batch(w)
        assert w._decode_ahead(batch)  # decoded for the image alone
        mv, model = sm.tf_two_inputs(dfs, "m")  # image + meta (age, size): other inputs
        w.holder.swap(load_model(root=dfs, name="m", alias="production", device="cpu",
                                 max_batch=64))
        w._finish_ahead(RawBatch.empty())
        w.complete_pending()
    finally:
        w.io.close(timeout_s=2)
    preds = {json.loads(m.value())["key"]: json.loads(m.value())
             for m in read_topic(conn, out, expect=N - len(BAD), settle_s=1.0)}
    assert {p["model_version"] for p in preds.values()} == {mv.version}
    recs = _records()
    good = [i for i in range(N) if i not in BAD]
    imgs = np.stack([sm.decoded(base64.b64decode(str(recs[i]["image"]))) for i in good])
    meta = np.asarray([[recs[i]["age"], recs[i]["size"]] for i in good], np.float32)
    kind, weight = (np.asarray(y, np.float32) for y in model({"image": imgs, "meta": meta}))
    for j, i in enumerate(good):
        np.testing.assert_allclose(preds[f"r{i}"]["scores"], kind[j], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(preds[f"r{i}"]["outputs"]["weight"]["scores"], weight[j],
                                   rtol=1e-4, atol=1e-5)
