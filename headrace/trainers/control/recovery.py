"""A table recovery that never ends is said in one line, with what to do.

faust recovers each table by reading its changelog up to the high watermark it saw at start.
After the broker lost its data, a changelog can report records (high watermark 2) that no
reader gets: recovery then waits for ever, logging only faust's "No event received ... since
recovery start", and the control plane is never ready (issue 34).

:class:`RecoveryWatch` looks every second, on its own thread (faust starts timers only once
recovery has completed), whether recovery has completed. Once it has not for ``deadline_s``, it
reads the changelogs (the probe blocks: on that thread). When one reports a high watermark its
readable records do not reach (nothing readable at all, or its last offset is a transaction
marker faust waits for in vain), it calls ``on_stuck`` (the app stops) and the process exits
with :class:`RecoveryStuck`: ONE line naming each such changelog and how to rebuild the job
table from the DFS (``headrace control --rebuild-table``), with a fatal exit code so an
orchestrator sees it. A recovery that is merely slow is logged once and left to go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from headrace.core.errors import FatalError, HeadraceError
from headrace.streams.clients import KafkaConnection, delete_topics
from headrace.streams.reading import iter_records, watermarks

log = logging.getLogger(__name__)
REBUILD_HINT = ("rebuild the job table from the DFS: `headrace control --rebuild-table` "
                "(or HEADRACE_CONTROL_REBUILD_TABLE=1; see docs/operations.md)")


@dataclass(frozen=True)
class Changelog:
    topic: str
    high: int  # the high watermark the broker reports (partition 0: the tables have one)
    readable: int  # records a reader got from it
    end: int = 0  # one past the last readable record's offset (0: none)

    @property
    def unreachable(self) -> bool:
        """faust recovers up to ``high - 1``: no reader ever gets there."""
        return self.high > self.end

    def describe(self) -> str:
        if not self.readable:
            return f"{self.topic} (high watermark {self.high}, no readable record)"
        return (f"{self.topic} (high watermark {self.high}, its readable records end at "
                f"offset {self.end - 1})")


def probe(conn: KafkaConnection, topics: Sequence[str], *, idle_s: float = 5.0
          ) -> list[Changelog]:
    """Each changelog's high watermark and what can actually be read from it."""
    out = []
    for t in topics:
        high = watermarks(conn, t, [0])[0][1]
        offsets = [r.offset for r in iter_records(conn, t, idle_s=idle_s)] if high > 0 else []
        out.append(Changelog(t, high, len(offsets), max(offsets) + 1 if offsets else 0))
    return out


def verdict(changelogs: Sequence[Changelog], waited_s: float) -> tuple[bool, str]:
    """(stuck, the one line to log)."""
    lost = [c for c in changelogs if c.unreachable]
    if lost:
        names = ", ".join(c.describe() for c in lost)
        return True, (f"control plane: table recovery has not completed after {waited_s:.0f}s "
                      f"and cannot: {names}: the changelog lost records or ends in a "
                      f"transaction marker (a broker restarted without its data?); "
                      f"{REBUILD_HINT}")
    counts = ", ".join(f"{c.topic} {c.readable}/{c.high}" for c in changelogs)
    return False, (f"control plane: table recovery still running after {waited_s:.0f}s "
                   f"(records readable/high watermark: {counts}); if it never completes, "
                   f"{REBUILD_HINT}")


@dataclass
class RecoveryWatch:
    """:meth:`start` it, or call :meth:`waiting` while recovery has not completed."""

    deadline_s: float
    look: Callable[[], Sequence[Changelog]]
    on_stuck: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    started: float | None = None
    stuck_line: str | None = None
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self, recovered: Callable[[], bool], *, every_s: float = 1.0) -> None:
        """Watch on a daemon thread until ``recovered()`` or a diagnosis."""
        def loop() -> None:
            while not recovered() and self._thread is None:
                self.waiting()
                time.sleep(every_s)

        threading.Thread(target=loop, name="recovery-deadline", daemon=True).start()

    def waiting(self) -> None:
        now = self.clock()
        if self.started is None:
            self.started = now
        if self._thread is not None or now - self.started < self.deadline_s:
            return
        waited = now - self.started
        self._thread = threading.Thread(target=self._diagnose, args=(waited,),
                                        name="recovery-watch", daemon=True)
        self._thread.start()

    def _diagnose(self, waited_s: float) -> None:
        try:
            stuck, line = verdict(self.look(), waited_s)
        except HeadraceError as exc:
            log.error("control plane: table recovery has not completed after %.0fs and its "
                      "changelogs cannot be read (%s); %s", waited_s, exc, REBUILD_HINT)
            return
        if not stuck:
            log.warning("%s", line)
            return
        self.stuck_line = line  # said once, by the process's exit (RecoveryStuck)
        self.on_stuck(line)

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)


class RecoveryStuck(FatalError):
    """The tables cannot be recovered from the broker: the message says how to rebuild."""


def watch_for(conn: KafkaConnection, changelogs: Sequence[str], *, deadline_s: float,
              on_stuck: Callable[[str], None]) -> RecoveryWatch:
    return RecoveryWatch(deadline_s=deadline_s, look=lambda: probe(conn, changelogs),
                         on_stuck=on_stuck)


def reset_changelogs(conn: KafkaConnection, changelogs: Sequence[str]) -> None:
    """Delete the tables' changelogs (they are recreated empty): the job table is then
    re-derived from the DFS; the event rules' counters and drift episodes start afresh."""
    gone = delete_topics(conn, changelogs)
    log.warning("--rebuild-table: %s; the job table is re-derived from the DFS, event-rule "
                "counts and drift episodes start afresh",
                f"deleted {', '.join(gone)}" if gone else "no changelog to delete")
