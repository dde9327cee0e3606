"""A consumer waiting on a long delivery stays in its group and skips nothing (D45's path: every
scorer of a group flushing for longer than ``max.poll.interval.ms`` after a broker restart left
the group at once). Real broker (``HEADRACE_TEST_BROKER`` picks which)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from headrace.scorers.engine.stream_io import StreamIO
from headrace.streams.clients import CONSUMER_DEFAULTS, KafkaConnection, make_producer
from headrace.streams.consuming import BatchConsumer

# Past the consumers' max.poll.interval.ms, with room for the group to notice.
WAIT_S = CONSUMER_DEFAULTS["max.poll.interval.ms"] / 1000.0 + 4.0


def _send(conn: KafkaConnection, topic: str, n: int, partitions: int) -> None:
    p = make_producer(conn)
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=i % partitions)
    assert p.flush(15) == 0


def _member(conn: KafkaConnection, topic: str, revoked: list[list[tuple[str, int]]]
            ) -> BatchConsumer:
    return BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic],
                         on_revoke=revoked.append)


def _read(c: BatchConsumer | StreamIO, until: int, seen: list[tuple[int, int]],
          limit_s: float = 30.0) -> None:
    give_up = time.monotonic() + limit_s
    while len(seen) < until and time.monotonic() < give_up:
        b = c.consume_batch(100, 0.5)
        seen += zip(b.partitions.tolist(), b.offsets.tolist(), strict=True)


def _each_once(seen: list[tuple[int, int]], partitions: int, per_partition: int) -> None:
    assert sorted(seen) == [(p, o) for p in range(partitions) for o in range(per_partition)]


@pytest.mark.parametrize("held", [True, False], ids=["held", "not-held"])
def test_a_member_that_holds_through_a_long_wait_keeps_its_partitions_and_skips_nothing(
        conn: KafkaConnection, topic_factory: Callable[..., str], held: bool) -> None:
    topic = topic_factory(partitions=3)
    _send(conn, topic, 300, 3)
    revoked: list[list[tuple[str, int]]] = []
    c = _member(conn, topic, revoked)
    try:
        first = c.consume_batch(100, 5.0)
        seen = list(zip(first.partitions.tolist(), first.offsets.tolist(), strict=True))
        _read(c, 120, seen)
        assert len(seen) >= 120 and len(c.assignment()) == 3
        _send(conn, topic, 300, 3)  # arrives while the member waits: none of it taken then
        end = time.monotonic() + WAIT_S
        while time.monotonic() < end:
            if held:
                c.hold()
            time.sleep(0.5)
        if not held:  # the control: without holding, the wait costs the membership
            c.consume_batch(100, 3.0)
            assert revoked, "the wait was too short to leave the group: the test proves nothing"
            # What was consumed before the membership ended commits nothing afterwards.
            c.commit(first.next_offsets(), consumed_at=first.consumed_at)
            assert set(c.committed(topic, [0, 1, 2]).values()) == {-1001}
            return
        assert not revoked and len(c.assignment()) == 3
        c.release()
        _read(c, 600, seen)
        assert not revoked
        _each_once(seen, 3, 200)
    finally:
        c.close()


class _AssignsInsidePoll:
    """The member's consumer, whose next poll first assigns ``assign`` (as the rebalance
    callback inside a poll does) and which records the records its polls return."""

    def __init__(self, member: BatchConsumer) -> None:
        self.member = member
        self.real = member.consumer
        self.assign: tuple[str, int] | None = None
        self.returned: list[tuple[int | None, int | None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def poll(self, timeout: float) -> Any:
        if self.assign is not None:
            self.member._set_assigned([self.assign], add=True)
            self.assign = None
        msg = self.real.poll(timeout)
        if msg is not None and msg.error() is None:
            self.returned.append((msg.partition(), msg.offset()))
        return msg


def test_a_record_returned_while_holding_is_put_back_and_read_after_the_release(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    """A partition assigned inside the hold's own poll is not paused yet: its record, if the
    poll returns one, is sought back to and read again after ``release``."""
    topic = topic_factory(partitions=2)
    _send(conn, topic, 20, 1)  # partition 0 only: partition 1 is empty until it is "assigned"
    revoked: list[list[tuple[str, int]]] = []
    c = _member(conn, topic, revoked)
    try:
        seen: list[tuple[int, int]] = []
        _read(c, 20, seen)
        assert len(c.assignment()) == 2
        c.hold()  # just polled: a short wait pauses nothing (a pause drops what was fetched)
        assert not c._held
        c.hold_after_s = 0.0
        c.hold()
        assert c._held == {(topic, 0), (topic, 1)}
        # Partition 1 given records and taken back to the moment before its assignment: not
        # held, not paused, not yet the member's. Each hold's poll assigns it first.
        p1 = TopicPartition(topic, 1)
        c.consumer.resume([p1])
        c._held.discard((topic, 1))
        p = make_producer(conn)
        for i in range(20):
            p.produce(topic, f"w{i}".encode(), partition=1)
        assert p.flush(15) == 0
        spy = _AssignsInsidePoll(c)
        c.consumer = spy  # type: ignore[assignment]
        give_up = time.monotonic() + 15
        while not spy.returned and time.monotonic() < give_up:
            c._set_assigned([(topic, 1)], add=False)
            spy.assign = (topic, 1)
            time.sleep(0.2)  # the fetch runs on while the partition is neither paused nor ours
            c.hold()
        assert spy.returned, "the hold's poll never returned a record of the new partition"
        [(partition, _)] = spy.returned
        assert partition == 1 and (topic, 1) in c._held
        assert c.consume_batch(100, 1.0).partitions.size == 0  # everything paused
        c.release()
        _read(c, 40, seen)
        assert not revoked
        # The returned record too, read once after the release: without the seek back to it,
        # the consumer's position had moved past it and it would be missing here.
        _each_once(seen, 2, 20)
    finally:
        c.close()


class _SlowProducer:
    """Acknowledges nothing until ``until``: a delivery retried through a broker outage."""

    def __init__(self, until: float) -> None:
        self.until = until

    def flush(self, timeout: float) -> int:
        left = self.until - time.monotonic()
        if left <= 0:
            return 0
        time.sleep(min(timeout, left))
        return 1 if time.monotonic() < self.until else 0

    def poll(self, timeout: float = 0) -> int:
        return 0


def test_the_scorers_flush_keeps_its_consumer_in_the_group_until_delivered(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    _send(conn, topic, 300, 3)
    revoked: list[list[tuple[str, int]]] = []
    io = StreamIO(conn, _member(conn, topic, revoked))
    try:
        seen: list[tuple[int, int]] = []
        _read(io, 100, seen)
        io._producer.producer = _SlowProducer(time.monotonic() + WAIT_S)  # type: ignore[assignment]
        io.flush(WAIT_S + 5)
        assert not revoked and len(io.assignment()) == 3
        io.release()
        _read(io, 300, seen)
        assert not revoked
        _each_once(seen, 3, 100)
    finally:
        io._consumer.close()


def test_offsets_consumed_before_a_partition_was_taken_away_are_not_committed(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    """A rebalance served by a hold takes the partitions away (eager: all of them): the batch
    being delivered was consumed before it and must not commit their offsets, which after a
    broker restart belong to a log that is gone (committed 725 on a new log ending at 697 skipped
    all of it, in the first restart runs of this change). A batch consumed afterwards commits."""
    topic = topic_factory(partitions=2)
    _send(conn, topic, 40, 2)
    revoked: list[list[tuple[str, int]]] = []
    a = _member(conn, topic, revoked)
    b: BatchConsumer | None = None
    try:
        batch = a.consume_batch(100, 5.0)
        while len(batch) < 40:
            batch.extend(a.consume_batch(100, 0.5))
        assert len(a.assignment()) == 2 and batch.consumed_at is not None
        b = BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic])  # joins in the background
        give_up = time.monotonic() + 30
        while not revoked and time.monotonic() < give_up:
            a.hold()  # a's hold polls, so it takes part in the rebalance b's joining starts
            b.consume_batch(10, 0.2)
        assert revoked, "no rebalance reached the holding member"
        a.commit(batch.next_offsets(), consumed_at=batch.consumed_at)
        assert a.committed(topic, [0, 1]) == {0: -1001, 1: -1001}  # nothing committed
        a.release()
        give_up = time.monotonic() + 30
        later = a.consume_batch(1, 0.2)  # the partition given back to a: read from the start
        while not len(later) and time.monotonic() < give_up:
            later = a.consume_batch(1, 0.2)
        assert len(later) == 1 and later.offsets[0] == 0
        a.commit(batch.next_offsets(), consumed_at=batch.consumed_at)  # still the old batch
        a.commit(later.next_offsets(), consumed_at=later.consumed_at)
        (p,) = later.partitions.tolist()
        assert a.committed(topic, [p]) == {p: 1}
    finally:
        a.close()
        if b is not None:
            b.close()
