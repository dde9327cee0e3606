"""The stream's rollout state as every scorer replica sees it: the latest ``RolloutState`` for
the stream on the compacted ``control.rollout``, followed from the beginning in a thread, so all
replicas (and a restarted one, once ``wait_caught_up`` returns) run the same candidate."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from headrace.contracts import RolloutState, parse
from headrace.core.bad_records import BadRecords
from headrace.streams.clients import KafkaConnection, partitions_of
from headrace.streams.reading import Follower, Record, probe_ends
from headrace.streams.topics import ControlTopics

if TYPE_CHECKING:
    from headrace.scorers.taps import TapContext

log = logging.getLogger(__name__)

POLL_S = 0.2


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

    def _ends(self) -> dict[int, int]:
        try:
            parts = partitions_of(self.conn, self.topic)
            return {p: end for p, (low, end) in probe_ends(self.conn, self.topic, parts).items()
                    if end > low}
        except Exception as exc:  # a missing topic: nothing to catch up with
            log.warning("cannot find the end of %s: %s", self.topic, exc)
            return {}

    def _run(self, stop: threading.Event) -> None:
        ends = self._ends()  # before following: whatever comes later is not waited for
        if not ends:
            self._caught_up.set()
        follower = Follower(self.conn, [self.topic], from_beginning=True)
        try:
            while not stop.is_set():
                records = follower.poll(POLL_S, max_messages=1000)
                for rec in records:
                    self.take(rec)
                    if ends and rec.offset + 1 >= ends.get(rec.partition, 0):
                        ends.pop(rec.partition, None)
                        if not ends:
                            self._caught_up.set()
        finally:
            follower.close()

    def take(self, rec: Record) -> None:
        """One record of the topic: this stream's state applied, an unreadable one skipped."""
        if rec.key != self.stream.encode() or not rec.value:
            return
        try:
            state = parse(RolloutState, rec.value)
        except Exception as exc:  # whatever the bytes: the thread goes on
            self.bad.skip(f"{rec.topic}/{rec.partition}@{rec.offset}", exc)
            return
        self.apply(state)


def watch_of(ctx: TapContext) -> RolloutWatch | None:
    """The scorer's one follower of the stream's rollout state, shared by its taps and roles
    (started by the first that asks, read to its end before it answers); None without Kafka."""
    if ctx.conn is None:
        return None
    watch = ctx.shared.get("rollout")
    if watch is None:
        topic = ControlTopics.of(ctx.settings).rollout
        watch = RolloutWatch(ctx.conn, topic, ctx.scorer.stream).start(ctx.stop)
        if not watch.wait_caught_up(timeout_s=10.0):
            log.warning("%s not read to its end in 10s; scoring without waiting for it", topic)
        ctx.shared["rollout"] = watch
    assert isinstance(watch, RolloutWatch)
    return watch
