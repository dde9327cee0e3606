"""D65 and D66 on the transactional path (``streams.transactions``), as
``test_group_hold.py`` checks them on the at-least-once path: a transaction whose outputs take
longer than ``max.poll.interval.ms`` to be acknowledged keeps its member in the group, and a
batch with a partition taken away after it was consumed is aborted, never committed (its
outputs would be committed while the partition's next owner scores it again). Real broker
(``HEADRACE_TEST_BROKER`` picks which)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from headrace.scorers.engine.stream_io import StreamIO, TransactionAborted
from headrace.streams.clients import KafkaConnection, make_consumer
from headrace.streams.consuming import BatchConsumer, RawBatch
from tests import real_kafka
from tests.streams.test_group_hold import WAIT_S, _each_once, _read, _send

pytestmark = pytest.mark.slow


def _txn_member(conn: KafkaConnection, topic: str, revoked: list[list[tuple[str, int]]]
                ) -> StreamIO:
    return StreamIO(conn, BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic],
                                        on_revoke=revoked.append),
                    transactional_id=f"tx-{uuid.uuid4().hex[:8]}")


class _SlowAcks:
    """The producer, whose outputs are acknowledged only at ``until``: a flush returns what is
    left, and ``commit_transaction`` (which flushes first) blocks until then."""

    def __init__(self, real: Any, until: float) -> None:
        self.real, self.until = real, until

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __len__(self) -> int:
        return len(self.real)

    def flush(self, timeout: float) -> int:
        left = self.until - time.monotonic()
        if left > 0:
            time.sleep(min(timeout, left))
        if time.monotonic() < self.until:
            return 1
        return int(self.real.flush(timeout))

    def commit_transaction(self, timeout: float) -> None:
        time.sleep(max(0.0, self.until - time.monotonic()))
        self.real.commit_transaction(timeout)


def _committed_outputs(conn: KafkaConnection, topic: str, wait_s: float) -> list[bytes]:
    """What a read_committed reader reads of ``topic`` within ``wait_s``."""
    c = make_consumer(conn, f"read-{uuid.uuid4().hex[:8]}", **{
        "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")
    finally:
        c.close()
    return got


def _transact(io: StreamIO, batch: RawBatch, out: str) -> None:
    io.begin()
    io.produce_many(out, batch.values, batch.keys, [])
    io.commit_transaction(batch.next_offsets(), timeout_s=WAIT_S + 10,
                          consumed_at=batch.consumed_at)


def test_a_transaction_waiting_on_its_outputs_keeps_its_consumer_in_the_group(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    """Before: ``commit_transaction`` waited for the acknowledgements without polling, and
    the member left its group (a rebalance took its partitions) after max.poll.interval.ms."""
    topic, out = topic_factory(partitions=3), topic_factory(partitions=1, prefix="out")
    _send(conn, topic, 300, 3)
    revoked: list[list[tuple[str, int]]] = []
    io = _txn_member(conn, topic, revoked)
    try:
        batch = io.consume_batch(100, 5.0)
        while len(batch) < 100:
            batch.extend(io.consume_batch(100 - len(batch), 0.5))
        real = io._producer.producer
        io._producer.producer = _SlowAcks(real, time.monotonic() + WAIT_S)
        _transact(io, batch, out)
        io._producer.producer = real
        assert not revoked and len(io.assignment()) == 3
        seen = list(zip(batch.partitions.tolist(), batch.offsets.tolist(), strict=True))
        _read(io, 300, seen)
        assert not revoked
        _each_once(seen, 3, 100)
        want = {p: batch.next_offsets().get((topic, p), -1001) for p in range(3)}
        assert io.committed(topic, [0, 1, 2]) == want  # the one transaction's offsets
        assert sorted(_committed_outputs(conn, out, 5.0)) == sorted(batch.values)
    finally:
        io.close(timeout_s=5)


def test_a_transaction_with_a_partition_taken_away_after_it_was_consumed_is_aborted(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    """A rebalance served by the hold takes the partitions away while the batch is in its
    transaction: the transaction aborts (nothing of it visible, no offset committed) and the
    consumer rewinds; a batch consumed afterwards commits. Before: its offsets and outputs were
    committed with the group's new generation, and the partition's new owner scored it again."""
    topic, out = topic_factory(partitions=2), topic_factory(partitions=1, prefix="out")
    _send(conn, topic, 40, 2)
    revoked: list[list[tuple[str, int]]] = []
    a = _txn_member(conn, topic, revoked)
    b: BatchConsumer | None = None
    try:
        batch = a.consume_batch(100, 5.0)
        while len(batch) < 40:
            batch.extend(a.consume_batch(100, 0.5))
        assert len(a.assignment()) == 2 and batch.consumed_at is not None
        a.begin()
        a.produce_many(out, batch.values, batch.keys, [])
        b = BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic])  # joins in the background
        give_up = time.monotonic() + 30
        while not revoked and time.monotonic() < give_up:
            a.hold()  # a's hold polls, so it takes part in the rebalance b's joining starts
            b.consume_batch(10, 0.2)
        assert revoked, "no rebalance reached the holding member"
        with pytest.raises(TransactionAborted, match="taken away after the batch was consumed"):
            a.commit_transaction(batch.next_offsets(), timeout_s=10.0,
                                 consumed_at=batch.consumed_at)
        assert a.committed(topic, [0, 1]) == {0: -1001, 1: -1001}
        give_up = time.monotonic() + 30
        later = a.consume_batch(100, 0.2)  # the partition given back to a: from the start
        while not len(later) and time.monotonic() < give_up:
            later = a.consume_batch(100, 0.2)
        assert len(later) and later.offsets.min() == 0
        _transact(a, later, out)
        (p,) = set(later.partitions.tolist())
        assert a.committed(topic, [p]) == {p: int(later.offsets.max()) + 1}
        if real_kafka.is_cluster(conn.bootstrap):  # Tansu's read_committed reads aborted ones
            # Only the later transaction's outputs are visible: none of the aborted batch's.
            assert sorted(_committed_outputs(conn, out, 5.0)) == sorted(later.values)
    finally:
        a.close(timeout_s=5)
        if b is not None:
            b.close()


def test_a_rebalance_served_while_the_transaction_flushes_aborts_it(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    """The partitions are taken away by a rebalance that the flush's own holds serve (the
    outputs are slow to be acknowledged while another member joins): the check comes after
    the flush, so the transaction is aborted, not committed with the new generation."""
    topic, out = topic_factory(partitions=2), topic_factory(partitions=1, prefix="out")
    _send(conn, topic, 40, 2)
    revoked: list[list[tuple[str, int]]] = []
    a = _txn_member(conn, topic, revoked)
    b: BatchConsumer | None = None
    stop = threading.Event()
    try:
        batch = a.consume_batch(100, 5.0)
        while len(batch) < 40:
            batch.extend(a.consume_batch(100, 0.5))
        a.begin()
        a.produce_many(out, batch.values, batch.keys, [])
        real = a._producer.producer
        a._producer.producer = _SlowAcks(real, time.monotonic() + 15)
        b = BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic])
        joiner = b

        def join() -> None:
            while not stop.is_set():
                joiner.consume_batch(10, 0.2)

        threading.Thread(target=join, daemon=True).start()
        with pytest.raises(TransactionAborted, match="taken away after the batch was consumed"):
            a.commit_transaction(batch.next_offsets(), timeout_s=30.0,
                                 consumed_at=batch.consumed_at)
        a._producer.producer = real
        assert revoked, "no rebalance reached the member while it flushed"
        assert a.committed(topic, [0, 1]) == {0: -1001, 1: -1001}
    finally:
        stop.set()
        time.sleep(0.5)
        a.close(timeout_s=5)
        if b is not None:
            b.close()
