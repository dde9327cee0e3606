"""librdkafka's own log lines, rate-limited, and which brokers refuse connections now.

A client whose brokers are all gone logs a failed connect for each broker each time it tries
again, from every client instance: a scorer left running after its cluster stopped wrote about
3,500 ERROR lines a minute. Here each (client, broker, error) gets one line per ``EVERY_S``
(saying how many like it were held back), a summary line says which brokers are unreachable
at most once per ``SUMMARY_S``, and ``unreachable()`` gives the probes the reason.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from headrace.core.rate_limited_log import RateLimitedLog

EVERY_S = 30.0  # one line per (client, broker, error) this often
SUMMARY_S = 60.0  # one summary line this often while a broker is unreachable
RECENT_S = 25.0  # a broker failed this recently is unreachable (> reconnect.backoff.max.ms)

# "FAC [rdkafka#consumer-7] [thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect
# to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"
_LINE = re.compile(r"^(?P<fac>\S+) \[(?P<client>[^\]]*)\] (?:\[thrd:[^\]]*\]: )?(?P<text>.*)$",
                   re.S)
_BROKER = re.compile(r"(?P<addr>[\w.\-\[\]:]+:\d+)(?:/\w+)?: ")
_NUMBERS = re.compile(r"\d+")
_CONNECT_FAILED = ("Connect to ", "Connection refused", "Disconnected", "Failed to resolve",
                   "Connection reset", "timed out")


def _failure(text: str) -> str:
    """The cause in a connection failure line ("Connection refused")."""
    cause = text.split(" failed: ", 1)[-1]
    return cause.split(" (after ", 1)[0].strip()


class ClientLog:
    """The ``logger`` handed to every librdkafka client (``KafkaConnection.base``):
    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client, text)``."""

    def __init__(self, logger: logging.Logger, *, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.logger = logger
        self.clock = clock
        self.lines = RateLimitedLog(logger, every_s=EVERY_S, clock=clock)
        self._lock = threading.Lock()
        # broker -> (first failure, last failure, error) while it refuses connections
        self._failing: dict[str, tuple[float, float, str]] = {}
        self._held_since_summary = 0
        self._next_summary = 0.0

    def log(self, level: int, msg: str, *args: object) -> None:
        text = msg % args if args else msg
        m = _LINE.match(text)
        client, body = (m["client"], m["text"]) if m else ("", text)
        b = _BROKER.search(body)
        broker, said = (b["addr"], body[b.end():]) if b else ("", body)
        failed = bool(broker) and any(s in said for s in _CONNECT_FAILED)
        key = (client, broker, _NUMBERS.sub("#", said))  # "after 0ms", "3 identical" vary
        if failed:
            self._failed(broker, _failure(said))
        if not self.lines.log(key, level, "%s", text):
            with self._lock:
                self._held_since_summary += 1
        if failed:
            self._summary()

    def _failed(self, broker: str, error: str) -> None:
        now = self.clock()
        with self._lock:
            first = self._failing.get(broker)
            start = first[0] if first is not None and now - first[1] <= RECENT_S else now
            self._failing[broker] = (start, now, error)

    def _summary(self) -> None:
        now = self.clock()
        with self._lock:
            if now < self._next_summary:
                return
            self._next_summary = now + SUMMARY_S
            held, self._held_since_summary = self._held_since_summary, 0
        why = self.unreachable()
        if why is not None:
            self.logger.warning("Kafka %s; %d client log lines held back since the last "
                                "summary (one per client, broker and error every %.0fs)",
                                why, held, EVERY_S)

    def unreachable(self) -> str | None:
        """Which brokers refused connections within the last ``RECENT_S``, for how long and
        why; None when none did."""
        now = self.clock()
        with self._lock:
            down = sorted((b, f) for b, f in self._failing.items() if now - f[1] <= RECENT_S)
        if not down:
            return None
        parts = [f"{b} ({err}, for {now - first:.0f}s)" for b, (first, _, err) in down]
        return f"broker(s) unreachable: {', '.join(parts)}"


_KAFKA_LOG = logging.getLogger("headrace.kafka")
_KAFKA_LOG.addHandler(logging.NullHandler())
CLIENT_LOG = ClientLog(_KAFKA_LOG)  # the process's clients share it: one view of the brokers


def unreachable() -> str | None:
    """The process's brokers that refuse connections now (``ClientLog.unreachable``)."""
    return CLIENT_LOG.unreachable()
