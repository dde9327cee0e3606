"""The stream's rollout state as every scorer replica sees it: the latest ``RolloutState`` for
the stream on the compacted ``control.rollout``, followed from the beginning in a thread, so all
replicas (and a restarted one, once ``wait_caught_up`` returns) run the same candidate."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from headrace.contracts import RolloutState
from headrace.core.bad_records import BadRecords
from headrace.streams.clients import KafkaConnection
from headrace.streams.compacted import Latest
from headrace.streams.reading import Follower, Record, follow_ends
from headrace.streams.topics import ControlTopics

if TYPE_CHECKING:
    from headrace.scorers.engine.taps import TapContext

log = logging.getLogger(__name__)

POLL_S = 0.2
LATE_S = 10.0  # how long a starting scorer waits for the rollout state before scoring


class RolloutWatch:
    def __init__(self, conn: KafkaConnection, topic: str, stream: str) -> None:
        self.conn = conn
        self.topic = topic
        self.stream = stream
        self._current: RolloutState | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._caught_up = threading.Event()
        self._thread: threading.Thread | None = None
        self.version = 0  # bumped on every change (a tap can tell a new rollout from the last)
        self.bad = BadRecords(log, f"rollout state on {topic}")
        self._key = stream.encode()
        self._latest = Latest(RolloutState, self.bad, keep=lambda k: k == self._key)

    @property
    def current(self) -> RolloutState | None:
        """The stream's latest state; None when no rollout was ever set (or it was stopped:
        a state whose ``candidate_version`` is None)."""
        with self._lock:
            st = self._current
        return st if st is not None and st.candidate_version is not None else None

    def apply(self, state: RolloutState) -> None:
        """Take ``state`` (read from the topic, or just published by this process)."""
        if state.stream != self.stream:
            return
        with self._changed:
            if self._current == state:
                return
            self._current = state
            self.version += 1
            self._changed.notify_all()
        log.info("rollout for %s: %s %s", self.stream,
                 state.role.value if state.role else "none", state.candidate_version)

    def start(self, stop: threading.Event) -> RolloutWatch:
        self._thread = threading.Thread(target=self._run, args=(stop,), name="rollout-watch",
                                        daemon=True)
        self._thread.start()
        return self

    def wait_caught_up(self, timeout_s: float = 10.0) -> bool:
        """Block until the topic has been read up to the end it had at start (verified by
        reading to EOF: Tansu's high watermark can be low); False on timeout."""
        return self._caught_up.wait(timeout_s)

    def _run(self, stop: threading.Event) -> None:
        ends = follow_ends(self.conn, self.topic)  # before following: later ones not waited for
        if not ends:
            self._caught_up.set()
        follower = Follower(self.conn, [self.topic], from_beginning=True)
        started = time.monotonic()
        try:
            while not stop.is_set():
                for rec in follower.poll(POLL_S, max_messages=1000):
                    self.take(rec)
                if not self._caught_up.is_set() and follower.reached(ends):
                    self._caught_up.set()
                    took = time.monotonic() - started
                    if took > LATE_S:  # the scorer went on without it: say when it caught up
                        log.warning("%s read to its end after %.1f s", self.topic, took)
        finally:
            follower.close()

    def take(self, rec: Record) -> None:
        """One record of the topic, folded into the stream's latest state (``Latest``): a
        tombstone, or bytes that are no state (counted in ``bad``), leave no rollout."""
        if not self._latest.take(rec):
            return
        state = self._latest.get(self._key)
        if state is not None:
            self.apply(state)
            return
        with self._changed:  # the stream's state removed: as if never set
            self._current = None
            self.version += 1
            self._changed.notify_all()
        log.info("rollout for %s removed", self.stream)


def watch_of(ctx: TapContext) -> RolloutWatch | None:
    """The scorer's one follower of the stream's rollout state, shared by its taps and roles
    (started by the first that asks, read to its end before it answers); None without Kafka."""
    if ctx.conn is None:
        return None
    watch = ctx.shared.get("rollout")
    if watch is None:
        topic = ControlTopics.of(ctx.settings).rollout
        watch = RolloutWatch(ctx.conn, topic, ctx.scorer.stream).start(ctx.stop)
        if not watch.wait_caught_up(timeout_s=LATE_S):
            log.warning("%s not read to its end in %.0fs; scoring without waiting for it",
                        topic, LATE_S)
        ctx.shared["rollout"] = watch
    assert isinstance(watch, RolloutWatch)
    return watch
