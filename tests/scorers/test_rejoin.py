"""A member left holding nothing while nobody reads the stream rejoins with a new consumer (D45).

Seen after a broker restart (tests/faults/test_broker_restart.py, CI and here): both scorers of
a group lost their partitions (their sessions and max.poll.interval.ms ran out during a 10 s
flush) and then polled for minutes without being given any again, every record acknowledged
after the restart unread, nothing committed (their stacks: the loop in ``consume_batch``).
"""

from __future__ import annotations

import time
import uuid

from headrace.scorers.stall import Rejoin
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.consuming import BatchConsumer
from headrace.streams.topics import TopicSpec
from tests.fixtures import eventually


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def test_rejoin_is_due_after_the_standstill_and_not_again_at_once() -> None:
    clock = Clock()
    idle: list[tuple[float, int] | None] = [None]
    r = Rejoin(lambda: idle[0], after_s=20.0, clock=clock)
    assert r.due() is None  # holding partitions, or nothing waits
    idle[0] = (19.0, 500)
    assert r.due() is None
    idle[0] = (21.0, 500)
    why = r.due()
    assert why is not None and "committed nothing for 21s and 500 records wait" in why
    clock.t += 5.0
    idle[0] = (26.0, 500)
    assert r.due() is None  # the new member is joining
    clock.t += 20.0
    assert r.due() is not None


def test_a_rejoined_member_is_given_its_partitions_again(conn: KafkaConnection) -> None:
    topic = f"rejoin-{uuid.uuid4().hex[:8]}"
    ensure_topics(conn, [TopicSpec(topic, 2, "test")])
    c = BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic])
    try:
        eventually(lambda: c.consume_batch(10, 0.2) is not None and len(c.assignment()) == 2,
                   timeout_s=30, what="the first assignment")
        old = c.consumer
        rewinds = c.rewinds
        c.rejoin("a test")
        assert c.consumer is not old and c.assignment() == [] and c.rewinds == rewinds + 1
        t0 = time.monotonic()
        eventually(lambda: c.consume_batch(10, 0.2) is not None and len(c.assignment()) == 2,
                   timeout_s=30, what="the partitions given to the new member")
        assert time.monotonic() - t0 < 30
    finally:
        c.close()
