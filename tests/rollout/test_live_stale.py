"""A replica never publishes live counts behind the ones another replica already published.

The follower keeps the highest ``next_offset`` per key, Kafka's log cleaner the last record: a
stale snapshot sent after a newer one (a replica that lost the partition in a rebalance and
flushed late) would survive compaction, and a scorer restarted on the compacted topic would
resume from it, losing the newer replica's counts."""

from __future__ import annotations

import numpy as np

from headrace.contracts import LiveCounts, RolloutRole
from headrace.scorers.rollout.live_counts import (
    BatchRows,
    LiveComparison,
    LiveCountsFollower,
    Pair,
)
from headrace.streams.reading import Record

PAIR = Pair("s", "m", 1, 2)
TOPIC = "control.rollout.live"


def published(follower: LiveCountsFollower, partition: int, next_offset: int) -> None:
    lc = LiveCounts(stream="s", model_name="m", production_version=1, candidate_version=2,
                    role=RolloutRole.SHADOW, partition=partition, next_offset=next_offset,
                    classes=["no", "yes"], rows=next_offset, matrix=[[next_offset, 0], [0, 0]])
    follower.take(Record(TOPIC, 0, 0, lc.key(), lc.to_bytes(), ()))


def batch(partition: int, first: int, n: int) -> BatchRows:
    offsets = np.arange(first, first + n)
    zeros = np.zeros(n, dtype=np.int64)
    return BatchRows(partition=partition, end_offset=first + n, offsets=offsets,
                     production=zeros, candidate=zeros,
                     production_confidence=np.ones(n), candidate_confidence=np.ones(n),
                     candidate_missing_offsets=np.array([], dtype=np.int64),
                     production_failed_offsets=np.array([], dtype=np.int64))


def test_counts_behind_another_replicas_are_not_published() -> None:
    follower = LiveCountsFollower(None, TOPIC, "s")  # type: ignore[arg-type] - fed by hand
    comp = LiveComparison(PAIR, ("no", "yes"), follower)
    comp.add(batch(0, 0, 50))  # this replica counted offsets 0-49 of partitions 0 and 1
    comp.add(batch(1, 0, 50))
    published(follower, 0, 80)  # then another, holding partition 0 now, published up to 80
    snaps = comp.snapshots()
    assert [(s.partition, s.next_offset) for s in snaps] == [(1, 50)]
    # What a restarted scorer adopts is the newer replica's, on the whole log or compacted.
    assert follower.newest(PAIR, 0).next_offset == 80  # type: ignore[union-attr]


def test_counts_level_with_or_past_the_published_ones_go_out() -> None:
    follower = LiveCountsFollower(None, TOPIC, "s")  # type: ignore[arg-type] - fed by hand
    comp = LiveComparison(PAIR, ("no", "yes"), follower)
    comp.add(batch(0, 0, 50))
    published(follower, 0, 50)  # its own last snapshot, read back
    comp.add(batch(0, 50, 10))
    assert [(s.partition, s.next_offset) for s in comp.snapshots()] == [(0, 60)]
    assert [(s.partition, s.next_offset) for s in comp.snapshots(all_partitions=True)] == [
        (0, 60)]
