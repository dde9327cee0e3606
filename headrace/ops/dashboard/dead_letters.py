"""Dead letters per stream, read in the background and kept for the page.

Reading a stream's dead-letter topic takes a consumer and a pass over the topic: with dozens of
streams that is seconds, too slow for every page refresh. A background loop reads each stream
in turn (the configured ones first) and keeps a summary (count, groups by reason, the last
letters); a request is answered from it, and reads only a stream it has not seen yet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from headrace.core.errors import HeadraceError, ValidationFailed
from headrace.streams.clients import KafkaConnection

KEEP_LETTERS = 20  # the newest letters kept per stream; a request for more reads the topic
FRESH_S = 30.0  # a summary older than this is read again on request


class DeadLetterBoard:
    def __init__(self, conn: KafkaConnection | None, root: Path) -> None:
        self.conn = conn
        self.root = root
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def read(self, stream: str) -> dict[str, Any]:
        """Read ``stream``'s dead-letter topic now and keep its summary."""
        from headrace.ops import deadletters

        if self.conn is None:
            return {"stream": stream, "error": "no Kafka configured", "count": None,
                    "groups": [], "letters": []}
        try:
            letters = deadletters.read_letters(self.conn, stream, timeout_s=10)
        except ValidationFailed as exc:  # no dead-letter topic
            data: dict[str, Any] = {"stream": stream, "error": str(exc), "count": None,
                                    "groups": [], "letters": []}
        except HeadraceError as exc:  # the broker is down: say so, keep the last summary
            with self._lock:
                old = self._cache.get(stream)
            return {**old[1], "error": str(exc)} if old else {
                "stream": stream, "error": str(exc), "count": None, "groups": [], "letters": []}
        else:
            ledger = deadletters.load_ledger(self.root, stream)
            data = {"stream": stream, "error": None, "count": len(letters),
                    "groups": [g.__dict__ for g in deadletters.summarize(letters, ledger)],
                    "letters": [{**lt.to_json(preview=200),
                                 "redriven": bool(ledger.redriven(lt))}
                                for lt in letters[-KEEP_LETTERS:]]}
        with self._lock:
            self._cache[stream] = (time.monotonic(), data)
        return data

    def get(self, stream: str, *, max_letters: int) -> dict[str, Any]:
        with self._lock:
            cached = self._cache.get(stream)
        fresh = cached is not None and time.monotonic() - cached[0] < FRESH_S
        data = cached[1] if cached is not None and fresh and max_letters <= KEEP_LETTERS \
            else self.read(stream)
        if max_letters > KEEP_LETTERS and data.get("count"):
            data = self._with_letters(stream, max_letters)
        return {**data, "letters": data["letters"][-max_letters:] if max_letters else []}

    def _with_letters(self, stream: str, max_letters: int) -> dict[str, Any]:
        from headrace.ops import deadletters

        assert self.conn is not None
        letters = deadletters.read_letters(self.conn, stream, timeout_s=10)
        ledger = deadletters.load_ledger(self.root, stream)
        with self._lock:
            base = self._cache[stream][1]
        return {**base, "letters": [{**lt.to_json(preview=200),
                                     "redriven": bool(ledger.redriven(lt))}
                                    for lt in letters[-max_letters:]]}

    def counts(self) -> dict[str, dict[str, Any]]:
        """stream -> {count, error} as last read (streams not read yet are absent)."""
        with self._lock:
            return {s: {"count": d["count"], "error": d["error"]}
                    for s, (_, d) in self._cache.items()}

    def refresh(self, streams: Iterable[str], stop: Callable[[], bool]) -> None:
        """Read every stream once, in the order given, until ``stop()``."""
        for s in streams:
            if stop():
                return
            self.read(s)
