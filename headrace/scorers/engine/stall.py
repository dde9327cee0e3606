"""The stall check's lag source: the broker's high watermarks against the consumer's position,
read on a thread of its own every few seconds, so the scoring loop never waits for the broker.

A stalled scorer (a hung group coordinator, a fetcher that stopped) still polls, and its
polls return nothing: only the broker's watermarks, asked afresh, show records it is not
reading. The probes read the last snapshot (``ProbeState.lag``); an old snapshot (the broker
did not answer) says nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

Lag = dict[tuple[str, int], int]


class LagWatch:
    def __init__(self, source: Callable[[], Lag], *, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 also: Callable[[], None] | None = None) -> None:
        self.source, self.every_s, self.clock = source, every_s, clock
        self.also = also  # run each period too (``GroupStandstill.refresh``)
        self._snapshot: tuple[float, Lag] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        try:
            lag = self.source()
        except Exception as exc:  # never kill the watch: the snapshot just ages
            log.debug("lag check failed: %s", exc)
            return
        if lag:
            self._snapshot = (self.clock(), lag)

    def snapshot(self) -> Lag | None:
        """The last lag read, if it is recent (within three periods); else None."""
        snap = self._snapshot
        if snap is None or self.clock() - snap[0] > 3 * self.every_s + 5.0:
            return None
        return snap[1]

    def start(self) -> LagWatch:
        def loop() -> None:
            while not self._stop.wait(self.every_s):
                self.refresh()
                if self.also is not None:
                    self.also()

        self._thread = threading.Thread(target=loop, name="lag-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


View = dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (committed, end)


class GroupStandstill:
    """The group's progress on the topic, watched while this member holds none of it.

    A member without partitions has nothing of its own to be stalled on, yet it may be the one
    that should read them: after a broker restart both scorers of a group were seen holding
    nothing for minutes while thousands of records waited, nothing committed, each `/livez`
    green. While it holds none, this reads the group's committed offsets (the log's start where
    there is none) and the ends; records waiting while the committed offsets stand still for
    ``stall_s`` is a stall (``ProbeState.stalled``): nobody is consuming them.
    """

    def __init__(self, source: Callable[[], View], holding: Callable[[], int], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.holding, self.clock = source, holding, clock
        self._committed: dict[tuple[str, int], int] | None = None
        self._since = 0.0
        self._waiting = 0

    def refresh(self) -> None:
        if self.holding() > 0:
            self._committed = None  # its own lag says how it does
            return
        try:
            view = self.source()
        except Exception as exc:  # never kill the watch: no view, no verdict
            log.debug("group progress check failed: %s", exc)
            return
        if not view:
            return
        committed = {tp: c for tp, (c, _) in view.items()}
        if committed != self._committed:
            self._committed, self._since = committed, self.clock()
        self._waiting = sum(max(0, end - c) for c, end in view.values())

    def standstill(self) -> tuple[float, int] | None:
        """(seconds the group's committed offsets have not moved, records waiting), while this
        member holds nothing and records wait; else None."""
        if self._committed is None or self.holding() > 0 or self._waiting <= 0:
            return None
        return self.clock() - self._since, self._waiting
