"""A scorer's topics, gone from the broker, are created again as at start (D42).

With auto-creation off (tests/streams/test_topic_autocreation.py), a topic a broker lost stays
gone until someone creates it: the scorer does, with the partitions and config of its catalog,
when its loop retries or its consumer says a topic is unknown.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import pytest

from headrace.core.errors import BrokerUnavailable
from headrace.scorers.engine.topic_keeper import TopicKeeper
from headrace.streams.clients import (
    KafkaConnection,
    delete_topics,
    ensure_topics,
    partition_count,
)
from headrace.streams.topics import TopicSpec


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_deleted_topic_is_created_again_with_its_partitions(
        conn: KafkaConnection, caplog: pytest.LogCaptureFixture) -> None:
    name = f"kept-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name, 3, "test")
    ensure_topics(conn, [spec])
    delete_topics(conn, [name])
    keeper = TopicKeeper(conn, [spec])
    with caplog.at_level(logging.WARNING, "headrace.scorers.engine.topic_keeper"):
        assert keeper.check_now("flush failed: 3 messages not acknowledged") == [name]
    assert partition_count(conn, name) == 3
    assert f"{name}: 3 partition(s)" in caplog.text and "flush failed" in caplog.text
    delete_topics(conn, [name])


def test_checks_are_rate_limited_and_a_broker_away_is_not_an_error() -> None:
    clock = Clock()
    calls: list[Any] = []
    answers: list[Any] = [BrokerUnavailable("away"), ["t"], []]

    def ensure(conn: Any, specs: Any, **kw: Any) -> list[str]:
        calls.append(specs)
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return list(a)

    keeper = TopicKeeper(KafkaConnection("127.0.0.1:1"), [TopicSpec("t", 2, "test")],
                         every_s=5.0, clock=clock, ensure=ensure)
    assert keeper.check_now("x") == []  # the broker is away: nothing, no exception
    clock.t += 1.0
    assert keeper.check_now("x") == [] and len(calls) == 1  # within every_s: not asked
    clock.t += 5.0
    assert keeper.check_now("x") == ["t"] and keeper.recreated == ["t"]
    clock.t += 5.0
    assert keeper.check_now("x") == [] and len(calls) == 3


def test_the_loop_never_waits_for_the_check() -> None:
    """The loop's call returns at once: the broker may take its whole timeout to answer."""
    release = threading.Event()
    asked: list[str] = []

    def slow(conn: Any, specs: Any, **kw: Any) -> list[str]:
        asked.append("x")
        release.wait(10)
        return []

    keeper = TopicKeeper(KafkaConnection("127.0.0.1:1"), [TopicSpec("t", 2, "test")],
                         every_s=0.0, ensure=slow)
    t0 = time.monotonic()
    keeper.check("commit failed")
    keeper.check("commit failed")  # one check at a time
    assert time.monotonic() - t0 < 1.0
    release.set()
    assert keeper._thread is not None
    keeper._thread.join(5)
    assert asked == ["x"]
