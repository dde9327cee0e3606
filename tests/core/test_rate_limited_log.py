"""The package's one rate-limited logger, on an injected clock; and each of its callers (bad
records, client error events, undecodable batches, the shadow's drops) going through it."""

from __future__ import annotations

import logging
import math
import threading

import pytest

from headrace.core.rate_limited_log import RateLimitedLog


def _limited(every_s: float) -> tuple[RateLimitedLog, list[float]]:
    now = [0.0]
    return RateLimitedLog(logging.getLogger("t.rll"), every_s=every_s, clock=lambda: now[0]), now


def test_one_line_per_key_per_interval_with_the_count_held_back(
        caplog: pytest.LogCaptureFixture) -> None:
    lines, now = _limited(10.0)
    with caplog.at_level(logging.WARNING, "t.rll"):
        said = [lines.warning("a", "a %d", i) for i in range(5)]
        said.append(lines.warning("b", "b %d", 0))  # another key is not held back by a
        now[0] = 9.9
        said.append(lines.warning("a", "a %d", 5))
        now[0] = 10.0
        said.append(lines.warning("a", "a %d", 6))
        said.append(lines.warning("a", "a %d", 7))
    assert said == [True, False, False, False, False, True, False, True, False]
    assert [r.getMessage() for r in caplog.records] == [
        "a 0", "b 0", "a 6 (5 more like it since the last line)"]


def test_the_level_is_kept_and_a_held_line_is_not_formatted(
        caplog: pytest.LogCaptureFixture) -> None:
    lines, _ = _limited(10.0)

    class Boom:
        def __str__(self) -> str:
            raise AssertionError("formatted a line that was held back")

    with caplog.at_level(logging.DEBUG, "t.rll"):
        assert lines.error(1, "first %s", "x")
        assert not lines.error(1, "second %s", Boom())
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.ERROR, "first x")]


def test_an_infinite_interval_logs_once_per_key_for_good() -> None:
    lines, now = _limited(math.inf)
    assert lines.admit(("t", "E")) == 0 and lines.admit(("t", "F")) == 0
    now[0] = 1e12
    assert lines.admit(("t", "E")) is None


def test_threads_share_one_line_per_interval() -> None:
    lines, _ = _limited(60.0)
    said: list[int | None] = []
    go = threading.Barrier(8)

    def hit() -> None:
        go.wait()
        said.extend(lines.admit("k") for _ in range(1000))

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert said.count(0) == 1 and said.count(None) == 7999


def test_undecodable_batches_log_once_per_topic_and_error_kind(
        caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("aiokafka")
    from headrace.trainers.control import undecodable

    topic = "t-undecodable-unit"
    with caplog.at_level(logging.ERROR, logger=undecodable.__name__):
        for i in range(3):
            undecodable.note_skipped(topic, i, i, ValueError("bad lz4"))
        undecodable.note_skipped(topic, 9, 9, KeyError("x"))
    lines = [r.getMessage() for r in caplog.records if topic in r.getMessage()]
    assert len(lines) == 2 and "ValueError" in lines[0] and "KeyError" in lines[1]
    assert undecodable.skipped()[topic] == 4
