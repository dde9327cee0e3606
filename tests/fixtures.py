"""Shared test helpers: one ``eventually`` wait, the topic readers, one scorer harness.

Waits are on conditions, never on sleeps: ``eventually`` polls a condition until it holds or
the timeout passes, and says what it waited for when it gives up.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from headrace.core.settings import Settings
from headrace.scorers.engine.settings import load_scorer_settings
from headrace.scorers.serving import Scorer
from headrace.streams.clients import (
    KafkaConnection,
    make_consumer,
    partition_count,
    partitions_of,
)
from headrace.streams.reading import Record, probe_ends, read_range
from headrace.streams.topics import dlq_topic, predictions_topic

T = TypeVar("T")


def eventually(cond: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.05,
               what: str = "condition") -> T:
    """Poll ``cond`` until it returns something truthy; return that. Raise AssertionError
    naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def from_the_start(conn: KafkaConnection, topic: str) -> Consumer:
    """A fresh consumer (no group commits) assigned every partition of ``topic`` from its
    first offset."""
    c = make_consumer(conn, f"test-reader-{uuid.uuid4().hex[:8]}")
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions_of(conn, topic)])
    return c


def read_topic(conn: KafkaConnection, topic: str, *, expect: int, timeout_s: float = 30.0,
               settle_s: float = 0.5) -> list[Any]:
    """Every message a fresh consumer reads from the start of every partition (no group
    commits), waiting until ``expect`` arrived, then ``settle_s`` more to catch extras."""
    c = from_the_start(conn, topic)
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            out += [m for m in c.consume(num_messages=10_000, timeout=0.2) if m.error() is None]
            if len(out) >= expect and settle_until is None:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
    finally:
        c.close()
    return out


def read_all(conn: KafkaConnection, topic: str) -> list[Record]:
    """Every record a fresh consumer reads, to the verified end of every partition: what the
    topic holds now (``read_topic`` instead waits for records still coming)."""
    n = partition_count(conn, topic)
    assert n is not None
    bounds = probe_ends(conn, topic, range(n))
    return read_range(conn, topic, {p: (lo, end) for p, (lo, end) in bounds.items()})


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@contextmanager
def scorer_thread(settings: Settings, conn: KafkaConnection, **overrides: Any) -> Iterator[Scorer]:
    """The scorer harness: a real ``Scorer`` on a thread, small batches, probes on a free
    port; stopped (and its error, if any, raised) when the block ends."""
    stream = settings.streams[0]
    opts: dict[str, Any] = {"stream": stream, "http_port": 0, "http_host": "127.0.0.1",
                            "max_wait_ms": 20, "batch_size": 512, "model_poll_s": 30.0,
                            "device": "cpu", "partitions": "0,1,2", "grace_s": 10}
    opts.update(overrides)
    scorer = Scorer(settings, load_scorer_settings(**opts), conn=conn)
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            scorer.run(stop)
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    assert scorer.probes_up.wait(30)
    try:
        yield scorer
    finally:
        stop.set()
        t.join(60)
        assert not t.is_alive(), "scorer did not stop"
    if errors:
        raise errors[0]


def wait_ready(scorer: Scorer, timeout_s: float = 60.0) -> None:
    eventually(lambda: http_get(scorer.http_port, "/readyz")[0] == 200, timeout_s=timeout_s,
               what="/readyz")


@contextmanager
def ready_scorer(settings: Settings, conn: KafkaConnection, **overrides: Any
                 ) -> Iterator[Scorer]:
    """``scorer_thread``, entered once the scorer is ready (a model loaded and warmed)."""
    with scorer_thread(settings, conn, **overrides) as scorer:
        wait_ready(scorer)
        yield scorer


def score(settings: Settings, conn: KafkaConnection, *, expect: int, dead: int = 0,
          **overrides: Any) -> tuple[list[Any], list[Any]]:
    """Run a ready scorer on the first stream until ``expect`` predictions (and ``dead`` dead
    letters, when some are expected) arrived: (predictions, dead letters)."""
    stream = settings.streams[0]
    with ready_scorer(settings, conn, **overrides):
        preds = read_topic(conn, predictions_topic(stream), expect=expect)
        letters = read_topic(conn, dlq_topic(stream), expect=dead) if dead else []
    return preds, letters
