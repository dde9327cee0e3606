"""Records a reader skipped: counted, and logged at most once a minute (not once per record,
so a topic full of garbage cannot flood the log)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from headrace.core.rate_limited_log import RateLimitedLog

LOG_EVERY_S = 60.0


class BadRecords:
    """``skip(where, reason)`` for each unreadable record; ``count`` and ``reasons`` for probes
    and tests. The first skip is logged at once, later ones with the count since."""

    def __init__(self, log: logging.Logger, what: str, *, every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.count = 0
        self.reasons: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._lines = RateLimitedLog(log, every_s=every_s, clock=clock)

    def skip(self, where: str, reason: object) -> None:
        text = (str(reason).splitlines() or [type(reason).__name__])[0][:300]
        with self._lock:
            self.count += 1
            self.reasons[text.split(":")[0][:80]] += 1
            count = self.count
        self._lines.warning(None, "skipped an unreadable %s at %s: %s; %d skipped in all",
                            self.what, where, text, count)
