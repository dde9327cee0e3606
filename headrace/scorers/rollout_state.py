"""The stream's rollout state as every scorer replica sees it: the latest ``RolloutState`` for
the stream on the compacted ``control.rollout``, followed from the beginning in a thread, so all
replicas (and a restarted one, once ``wait_caught_up`` returns) run the same candidate."""

from __future__ import annotations

import logging
import threading
import time

from headrace.contracts import RolloutState, parse
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import Follower, follow_ends

log = logging.getLogger(__name__)

POLL_S = 0.5


class RolloutWatch:
    def __init__(self, conn: KafkaConnection, topic: str, stream: str) -> None:
        self.conn = conn
        self.topic = topic
        self.stream = stream
        self._current: RolloutState | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._idle_since: float | None = None
        self._thread: threading.Thread | None = None
        self.version = 0  # bumped on every change (a tap can tell a new rollout from the last)

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

    def wait_caught_up(self, timeout_s: float = 10.0, idle_s: float = 0.5) -> bool:
        """Block until the topic has been read to its end (no record for ``idle_s``: Tansu's
        high watermark is unreliable); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            idle = self._idle_since
            if idle is not None and time.monotonic() - idle >= idle_s:
                return True
            time.sleep(0.05)
        return False

    def _run(self, stop: threading.Event) -> None:
        follower = Follower(self.conn, [self.topic], from_beginning=True)
        try:
            ends = follow_ends(self.conn, self.topic)  # idle means caught up only past them
            while not stop.is_set():
                records = follower.poll(POLL_S, max_messages=1000)
                if not records:
                    if self._idle_since is None and follower.reached(ends):
                        self._idle_since = time.monotonic()
                    continue
                self._idle_since = None
                for rec in records:
                    if rec.key != self.stream.encode() or not rec.value:
                        continue
                    try:
                        self.apply(parse(RolloutState, rec.value))
                    except Exception as exc:
                        log.warning("ignoring unreadable rollout state at offset %s: %s",
                                    rec.offset, exc)
        finally:
            follower.close()
