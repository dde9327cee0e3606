"""Records a reader skipped: counted, and logged at most once a minute (not once per record,
so a topic full of garbage cannot flood the log)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

LOG_EVERY_S = 60.0


class BadRecords:
    """``skip(where, reason)`` for each unreadable record; ``count`` and ``reasons`` for probes
    and tests. The first skip is logged at once, later ones with the count since."""

    def __init__(self, log: logging.Logger, what: str, *, every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.what, self.every_s, self.clock = log, what, every_s, clock
        self.count = 0
        self.reasons: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._logged_at: float | None = None
        self._unlogged = 0

    def skip(self, where: str, reason: object) -> None:
        text = (str(reason).splitlines() or [type(reason).__name__])[0][:300]
        with self._lock:
            self.count += 1
            self.reasons[text.split(":")[0][:80]] += 1
            now = self.clock()
            if self._logged_at is not None and now - self._logged_at < self.every_s:
                self._unlogged += 1
                return
            since, self._unlogged, self._logged_at = self._unlogged, 0, now
        more = f" ({since} more skipped since the last line)" if since else ""
        self.log.warning("skipped an unreadable %s at %s: %s; %d skipped in all%s",
                         self.what, where, text, self.count, more)
