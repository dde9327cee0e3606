"""The scorer's topics, kept: created again, with their partitions and config, when they are gone.

Headrace's clients never let a produce or a subscription auto-create a topic (a broker's default
partition count, no compaction for a control topic: D42), so a topic that disappears (deleted,
or a broker that lost its data) stays gone until someone creates it. The scorer created its
topics at start; when its loop retries (a produce, a flush, a commit) or its consumer says a topic
or partition is unknown, it checks them again, at most once per ``every_s``, and creates the
missing ones as at start, in one warning line, on a thread of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from headrace.core.errors import HeadraceError
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import TopicSpec

log = logging.getLogger(__name__)


class TopicKeeper:
    def __init__(self, conn: KafkaConnection, specs: Sequence[TopicSpec], *,
                 replication_factor: int | None = None, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 ensure: Callable[..., list[str]] = ensure_topics) -> None:
        self.conn, self.specs = conn, list(specs)
        self.replication_factor = replication_factor
        self.every_s, self.clock, self._ensure = every_s, clock, ensure
        self._last: float | None = None
        self._thread: threading.Thread | None = None
        self.recreated: list[str] = []  # every topic created again, in order

    def check(self, why: str) -> None:
        """``check_now`` on a thread of its own: the scoring loop never waits for the broker
        (a metadata request may take the connection's whole timeout while it is away)."""
        if self._thread is not None and self._thread.is_alive():
            return
        if self._last is not None and self.clock() - self._last < self.every_s:
            return
        self._thread = threading.Thread(target=self.check_now, args=(why,), daemon=True,
                                        name="topic-keeper")
        self._thread.start()

    def check_now(self, why: str) -> list[str]:
        """Create the topics that are missing now (rate-limited); the names created."""
        now = self.clock()
        if self._last is not None and now - self._last < self.every_s:
            return []
        self._last = now
        try:
            created = self._ensure(self.conn, self.specs,
                                   replication_factor=self.replication_factor)
        except HeadraceError as exc:  # the broker is away: the next retry checks again
            log.debug("cannot check the scorer's topics now: %s", exc)
            return []
        if created:
            self.recreated += created
            parts = {s.name: s.partitions for s in self.specs}
            log.warning("topic(s) %s were gone from the broker (deleted, or a broker that lost "
                        "its data; seen as: %s): created again as at start (%s)",
                        ", ".join(created), why[:200],
                        ", ".join(f"{n}: {parts[n]} partition(s)" for n in created))
        return created
