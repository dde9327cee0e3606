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
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.every_s, self.clock = source, every_s, clock
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

        self._thread = threading.Thread(target=loop, name="lag-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
