"""Every scorer replica reads the same rollout state: a new ``RolloutWatch`` has applied the
latest ``RolloutState`` of its stream before ``wait_caught_up`` returns, and follows changes."""

from __future__ import annotations

import threading
import time
import uuid

from headrace.contracts import RolloutRole, RolloutState
from headrace.scorers.rollout.state import RolloutWatch
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics
from tests.fixtures import eventually


def _send(conn: KafkaConnection, topic: str, *states: RolloutState) -> None:
    send_events(conn, topic, states, key_of=lambda e: e.key().decode())


def test_a_new_watch_starts_from_the_latest_state_of_its_stream(conn: KafkaConnection) -> None:
    topics = ControlTopics.with_prefix(f"rw{uuid.uuid4().hex[:8]}")
    ensure_topics(conn, topics.specs())
    shadow = RolloutState(stream="s", model_name="m", candidate_version=2,
                          role=RolloutRole.SHADOW)
    _send(conn, topics.rollout, shadow,
          RolloutState(stream="other", model_name="m", candidate_version=9,
                       role=RolloutRole.SHADOW))
    for _ in range(3):  # a restarted replica, every time: never scores before it has the state
        stop = threading.Event()
        watch = RolloutWatch(conn, topics.rollout, "s").start(stop)
        try:
            assert watch.wait_caught_up(timeout_s=20)
            assert watch.current == shadow
        finally:
            stop.set()
    stop = threading.Event()
    watch = RolloutWatch(conn, topics.rollout, "s").start(stop)
    try:
        assert watch.wait_caught_up(timeout_s=20)
        _send(conn, topics.rollout, RolloutState(stream="s", model_name="m",
                                                 reason="stopped"))
        eventually(lambda: watch.current is None, timeout_s=20, what="the stop applied")
    finally:
        stop.set()


def test_an_empty_topic_is_caught_up_at_once(conn: KafkaConnection) -> None:
    topics = ControlTopics.with_prefix(f"rw{uuid.uuid4().hex[:8]}")
    ensure_topics(conn, topics.specs())
    stop = threading.Event()
    watch = RolloutWatch(conn, topics.rollout, "s").start(stop)
    try:
        assert watch.wait_caught_up(timeout_s=5) and watch.current is None
    finally:
        stop.set()


def test_a_topic_ending_in_a_transaction_marker_is_caught_up_without_waiting_it_out(
        conn: KafkaConnection) -> None:
    """A transactional writer's commit marker takes the last offset: no record is read there.
    The watch must see it read to its end by position (EOF), not wait out its 10 s."""
    topics = ControlTopics.with_prefix(f"rw{uuid.uuid4().hex[:8]}")
    ensure_topics(conn, topics.specs())
    shadow = RolloutState(stream="s", model_name="m", candidate_version=2,
                          role=RolloutRole.SHADOW)
    p = make_producer(conn, **{"transactional.id": f"rw-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topics.rollout, shadow.to_bytes(), shadow.key())
    p.commit_transaction(30)
    stop = threading.Event()
    watch = RolloutWatch(conn, topics.rollout, "s").start(stop)
    try:
        t0 = time.monotonic()
        assert watch.wait_caught_up(timeout_s=20)
        assert time.monotonic() - t0 < 5.0, "caught up only by waiting"
        assert watch.current == shadow
    finally:
        stop.set()
