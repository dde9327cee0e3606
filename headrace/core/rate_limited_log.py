"""One log line per key per interval, so a broker down for a minute or a topic full of garbage
is a few lines, not one per poll or per record; each line says how many were held back since
the last one. The one rate limiter of the package: bad records, client error events, batches
the control plane cannot decode and the shadow's drops all log through it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable


class RateLimitedLog:
    """``log(key, level, msg, *args)`` writes the line if ``key`` was not logged in the last
    ``every_s`` seconds (``math.inf``: once per key for the process's life), else counts it."""

    def __init__(self, logger: logging.Logger, *, every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.every_s, self.clock = logger, every_s, clock
        self._last: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def admit(self, key: Hashable = None) -> int | None:
        """None if a line for ``key`` is due later (this one is counted as held back); else
        how many were held back since ``key``'s last line, and the interval starts again."""
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.every_s:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def log(self, key: Hashable, level: int, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level`` unless rate-limited; True if it was logged."""
        held = self.admit(key)
        if held is None:
            return False
        if held:
            msg += " (%d more like it since the last line)"
            args = (*args, held)
        self.logger.log(level, msg, *args)
        return True

    def warning(self, key: Hashable, msg: str, *args: object) -> bool:
        return self.log(key, logging.WARNING, msg, *args)

    def error(self, key: Hashable, msg: str, *args: object) -> bool:
        return self.log(key, logging.ERROR, msg, *args)
