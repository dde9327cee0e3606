"""The dashboard's rollout panel: every (production, candidate) pair's live comparison, as
``headrace models compare`` prints it (read from ``control.rollout.live``, cached a few
seconds so the page's polling does not re-read the topic on every tick)."""

from __future__ import annotations

import threading
import time
from typing import Any

from headrace.ops.rollout.compare_png import summary_lines
from headrace.ops.rollout.live_evidence import all_evidence
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics

CACHE_S = 5.0


class RolloutBoard:
    def __init__(self, conn: KafkaConnection | None, topics: ControlTopics) -> None:
        self.conn = conn
        self.topics = topics
        self._lock = threading.Lock()
        self._at = 0.0
        self._view: dict[str, Any] = {"pairs": []}

    def view(self) -> dict[str, Any]:
        with self._lock:
            if time.monotonic() - self._at < CACHE_S:
                return self._view
            if self.conn is None:
                self._view = {"pairs": [], "error": "no Kafka configured"}
            else:
                try:
                    pairs = [{**ev.as_dict(), "summary": summary_lines(ev)}
                             for ev in all_evidence(self.conn, self.topics)]
                    self._view = {"pairs": pairs}
                except Exception as exc:  # the panel says why; the page goes on
                    self._view = {"pairs": [], "error": str(exc).splitlines()[0][:300]}
            self._at = time.monotonic()
            return self._view
