"""A transaction commit that times out: the transaction coordinator is SIGSTOPped as
``commit_transaction`` is called and SIGCONTed after the commit's wait. Its outcome is unknown,
so the commit is not retried: the producer is recreated (its init settles the old transaction),
the consumer rewinds to its committed offsets and the batch is redone. A read_committed reader
then sees exactly one output of every input. Before the change the timed-out commit was
retried until its deadline and then raised ``FatalError`` (the scorer exited)."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from headrace.scorers.engine.stream_io import StreamIO, TransactionAborted
from headrace.streams.clients import KafkaConnection, ensure_topics, make_consumer, make_producer
from headrace.streams.consuming import BatchConsumer
from headrace.streams.topics import TopicSpec
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
INPUTS = 600
PAUSE_S = 7.0  # longer than the commit's wait, shorter than a broker's session timeout (9 s)
TXN_STATE_PARTITIONS = 6  # tools/kafka_cluster.py: transaction.state.log.num.partitions


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator(cluster: KafkaCluster, transactional_id: str) -> int:
    """The node coordinating ``transactional_id``: the leader of its __transaction_state
    partition (Kafka's ``abs(id.hashCode) % partitions``)."""
    h = _java_hash(transactional_id)
    return cluster.leader("__transaction_state", (0 if h == -(1 << 31) else abs(h))
                          % TXN_STATE_PARTITIONS)


class StopsCoordinatorOnCommit:
    """The producer, whose first ``commit_transaction`` SIGSTOPs the coordinator first (and a
    timer SIGCONTs it ``PAUSE_S`` later)."""

    def __init__(self, real: Any, cluster: KafkaCluster, node: int) -> None:
        self.real, self.cluster, self.node = real, cluster, node
        self.resumed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __len__(self) -> int:
        return len(self.real)

    def commit_transaction(self, timeout: float) -> None:
        n = self.cluster.node(self.node)
        n.signal(signal.SIGSTOP)

        def wake() -> None:
            n.signal(signal.SIGCONT)
            self.resumed.set()

        threading.Timer(PAUSE_S, wake).start()
        self.real.commit_transaction(timeout)


def _outputs(conn: KafkaConnection, topic: str, until: int, limit_s: float = 60.0
             ) -> Counter[bytes]:
    c = make_consumer(conn, f"read-{uuid.uuid4().hex[:8]}", **{
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False})
    got: Counter[bytes] = Counter()
    try:
        c.subscribe([topic])
        quiet_until = None
        give_up = time.monotonic() + limit_s
        while time.monotonic() < give_up:
            msg = c.poll(0.5)
            if msg is None:
                if sum(got.values()) >= until:
                    quiet_until = quiet_until or time.monotonic() + 3.0  # duplicates come late
                    if time.monotonic() > quiet_until:
                        break
                continue
            if msg.error() is None:
                got[msg.value() or b""] += 1
    finally:
        c.close()
    return got


def test_a_timed_out_commit_recreates_the_producer_and_each_input_has_one_output(
        kafka_cluster: KafkaCluster, conn: KafkaConnection) -> None:
    src, out = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    ensure_topics(conn, [TopicSpec(src, 3, "test"), TopicSpec(out, 3, "test")])
    p = make_producer(conn)
    for i in range(INPUTS):
        p.produce(src, f"r{i}".encode(), f"k{i}".encode())
    assert p.flush(30) == 0
    tid = f"txn-{uuid.uuid4().hex[:8]}"
    io = StreamIO(conn, BatchConsumer(conn, group_id=f"g-{src}", topics=[src]),
                  transactional_id=tid)
    node = coordinator(kafka_cluster, tid)
    faulty = StopsCoordinatorOnCommit(io._producer.producer, kafka_cluster, node)
    aborted: list[str] = []
    try:
        committed = 0  # inputs of the transactions seen to commit (before the fault's)

        def done() -> int:
            return sum(max(0, o) for o in io.committed(src, [0, 1, 2]).values())

        give_up = time.monotonic() + 120
        while time.monotonic() < give_up and (committed < INPUTS or done() < INPUTS):
            batch = io.consume_batch(100, 1.0)
            if not len(batch):
                continue
            try:
                io.begin()
                if not aborted and committed >= 200 and io._producer.producer is not faulty:
                    io._producer.producer = faulty  # this transaction's commit meets the pause
                io.produce_many(out, batch.values, batch.keys, [])
                io.commit_transaction(batch.next_offsets(), timeout_s=3.0,
                                      consumed_at=batch.consumed_at)
            except TransactionAborted as exc:
                aborted.append(str(exc))
                committed = done()
                continue
            committed += len(batch)
        assert aborted, "the commit never met the paused coordinator"
        assert any("commit outcome unknown" in a for a in aborted), aborted
        assert io._producer.producer is not faulty  # recreated
        assert faulty.resumed.wait(PAUSE_S + 5)
        got = _outputs(conn, out, INPUTS)
        assert set(got) == {f"r{i}".encode() for i in range(INPUTS)}
        twice = {k: n for k, n in got.items() if n != 1}
        assert not twice, f"inputs with more than one committed output: {twice}"
        assert done() == INPUTS
    finally:
        kafka_cluster.node(node).signal(signal.SIGCONT)
        io.close(timeout_s=5)
