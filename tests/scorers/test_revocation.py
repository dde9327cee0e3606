"""A revocation drops what the scorer consumed of the revoked partitions and has not scored yet,
even when the next assignment gives the same partitions back (D32).

Found with two scorers through a restart of the embedded (memory) broker: a member whose
partitions were revoked (its session timed out) and given back by the re-formed group still held
messages it had consumed from the lost log (offsets near 1750); it scored them and committed
their offsets in the new generation, so the group's offset on the new log jumped past records
nobody had read. The next owner of the partition fetched from there (the memory broker answers
a fetch beyond its log with nothing, not ``OFFSET_OUT_OF_RANGE``) and those records stayed
unscored. The same stale commit on Apache Kafka moves a partition's offset back or forth across
another member's work.

No broker: the consumer is a stand-in that runs the rebalance callbacks inside a consume, as
librdkafka does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import pytest

from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import ModelHolder
from headrace.scorers.engine.stream_io import RawBatch
from headrace.scorers.engine.worker import Worker

TOPIC = "data.revoked"


def _batch(partition: int, offsets: range) -> RawBatch:
    n = len(offsets)
    return RawBatch([b"{}"] * n, [None] * n, [TOPIC] * n, np.full(n, partition, np.int32),
                    np.asarray(offsets, np.int64), np.zeros(n, np.int64), [None] * n, 0.0)


class _Rebalancing:
    """A ``StreamIO`` stand-in: each consume hands out the next scripted batch; a callable step
    runs first, inside that consume (a rebalance callback)."""

    def __init__(self, owned: set[tuple[str, int]]) -> None:
        self.owned = owned
        self.steps: list[RawBatch | Callable[[], None]] = []
        self.rewinds = 0

    def assignment(self) -> list[tuple[str, int]]:
        return sorted(self.owned)

    def consume_batch(self, max_messages: int, timeout_s: float) -> RawBatch:
        while self.steps:
            step = self.steps.pop(0)
            if isinstance(step, RawBatch):
                return step
            step()
        return RawBatch.empty()


def _worker(io: _Rebalancing) -> Worker:
    return Worker(io=io, holder=ModelHolder(),  # type: ignore[arg-type]
                  metrics=ScorerMetrics(stream="revoked", model="m"),
                  predictions_topic="predictions.revoked", dlq_topic="dlq.revoked",
                  batch_size=100, max_wait_s=0.2, grace_s=5.0, transactional=False,
                  stop=threading.Event())


def test_messages_consumed_before_a_revocation_are_dropped_though_the_partitions_come_back(
        caplog: pytest.LogCaptureFixture) -> None:
    io = _Rebalancing({(TOPIC, 0), (TOPIC, 1)})
    worker = _worker(io)

    def rebalance() -> None:  # p0 revoked (session lost) and given back by the new group
        worker.on_revoked([(TOPIC, 0)])
        worker.batcher.assignment_changed.set()

    io.steps = [_batch(0, range(1750, 1753)), _batch(1, range(900, 902)), rebalance,
                _batch(0, range(0, 3))]
    with caplog.at_level(logging.INFO, "headrace.scorers.engine.batching"):
        batch = worker.batcher.next_batch(threading.Event())
    assert "dropped 3 consumed messages of revoked partitions" in caplog.text
    # Before: p0's offsets 1750-1752 were kept (p0 was owned again) and committed after 0-2.
    assert list(zip(batch.partitions.tolist(), batch.offsets.tolist(), strict=True)) == [
        (1, 900), (1, 901), (0, 0), (0, 1), (0, 2)]
    assert batch.next_offsets() == {(TOPIC, 0): 3, (TOPIC, 1): 902}


def test_a_batch_carried_over_a_revocation_loses_the_revoked_partitions() -> None:
    io = _Rebalancing({(TOPIC, 0), (TOPIC, 1)})
    worker = _worker(io)
    batcher = worker.batcher
    # What a byte budget left over from the batch before: consumed, not handed out.
    batcher._carry, batcher._carry_rewinds = _batch(0, range(40, 45)), io.rewinds
    worker.on_revoked([(TOPIC, 0)])  # the next consume's rebalance, before the carry is used
    io.steps = [_batch(0, range(0, 2))]
    batch = batcher.next_batch(threading.Event())
    assert batch.offsets.tolist() == [0, 1]


def test_a_batch_held_for_the_schema_registry_loses_partitions_revoked_meanwhile() -> None:
    from headrace.core.errors import RetriableError
    from headrace.scorers.engine.outputs import Outputs
    from headrace.scorers.wire.registry_records import REGISTRY_STAGE

    io = _Rebalancing({(TOPIC, 0), (TOPIC, 1)})
    worker = _worker(io)
    scored: list[RawBatch] = []

    def score(batch: RawBatch, model: object, ahead: object = None) -> Outputs:
        if not scored:  # the registry does not answer the first time
            scored.append(batch)
            raise RetriableError("the Schema Registry cannot give schema id 3 now",
                                 stage=REGISTRY_STAGE)
        scored.append(batch)
        return Outputs()

    def hold() -> None:  # the group rebalances while the worker holds: p0 goes
        io.owned.discard((TOPIC, 0))
        worker.on_revoked([(TOPIC, 0)])

    io.hold = hold  # type: ignore[attr-defined]
    io.max_message_bytes = 1 << 20  # type: ignore[attr-defined]
    worker.core.score = score  # type: ignore[method-assign]
    both = RawBatch([b"{}"] * 4, [None] * 4, [TOPIC] * 4, np.asarray([0, 1, 0, 1], np.int32),
                    np.asarray([10, 20, 11, 21], np.int64), np.zeros(4, np.int64), [None] * 4,
                    0.0)
    batch, _ = worker._score_holding(both, object(), None)  # type: ignore[arg-type]
    assert len(scored) == 2 and len(scored[0]) == 4
    assert batch.partitions.tolist() == [1, 1] and batch.offsets.tolist() == [20, 21]
    assert scored[1] is batch and batch.next_offsets() == {(TOPIC, 1): 22}
    assert worker._held_revoked is None
    reg = worker.metrics.registry
    assert reg.get_sample_value("headrace_scorer_retries_total",
                                {"stream": "revoked", "what": "schema_registry"}) == 1
