"""The latest record per key of a compacted topic: the one table every follower of such a topic
folds it into (rollout state, live counts, drift events and window states, the lineage index).

One rule, the one compaction keeps, so a reader builds the same table before and after the log
cleaner has run:

1. a record with a key and a value replaces whatever the key held (``newer``, when given, may
   refuse a value that is older by the record's own clock: a snapshot produced again);
2. a tombstone (a key with no value) removes the key;
3. a record with no key is no part of the table (a compacted topic refuses one): skipped;
4. bytes that are not the contract are counted (``BadRecords``) and the key holds no value: they
   are its latest record, the one compaction keeps, so the table is the same before and after
   the cleaner ran; the reader goes on, whatever the bytes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from headrace.contracts import Contract, parse
from headrace.core.bad_records import BadRecords
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import Record, read_to_end

C = TypeVar("C", bound=Contract)

log = logging.getLogger(__name__)


class Latest(Generic[C]):
    """The table: ``take`` each record in topic order (safe from a follower's thread while
    others read it); ``keep`` chooses keys before any value is parsed."""

    def __init__(self, model: type[C], bad: BadRecords, *,
                 keep: Callable[[bytes], bool] | None = None,
                 newer: Callable[[C, C], bool] | None = None) -> None:
        self.model = model
        self.bad = bad
        self._keep = keep
        self._newer = newer
        self._table: dict[bytes, C] = {}
        self._lock = threading.Lock()
        self.read = 0  # values parsed (tombstones and skipped records not counted)

    def take(self, rec: Record) -> bool:
        """Fold one record in; True when the table changed."""
        key = rec.key
        if key is None or (self._keep is not None and not self._keep(key)):
            return False
        if rec.value is None:  # a tombstone
            with self._lock:
                return self._table.pop(key, None) is not None
        try:
            value = parse(self.model, rec.value)
        except Exception as exc:  # whatever the bytes: the reader goes on
            self.bad.skip(f"{rec.topic}/{rec.partition}@{rec.offset}", exc)
            with self._lock:
                return self._table.pop(key, None) is not None
        with self._lock:
            self.read += 1
            old = self._table.get(key)
            if old is not None and self._newer is not None and not self._newer(old, value):
                return False
            self._table[key] = value
            return old != value

    def get(self, key: bytes | None) -> C | None:
        if key is None:
            return None
        with self._lock:
            return self._table.get(key)

    def table(self) -> dict[bytes, C]:
        """A copy of the table now."""
        with self._lock:
            return dict(self._table)

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)


def read_latest(conn: KafkaConnection, topic: str, model: type[C], *,
                keep: Callable[[bytes], bool] | None = None,
                newer: Callable[[C, C], bool] | None = None,
                bad: BadRecords | None = None) -> dict[bytes, C]:
    """``topic`` read from its start to its end now (verified by reading), as its table; empty
    when the topic does not exist yet."""
    latest = Latest(model, bad or BadRecords(log, f"{model.__name__} on {topic}"),
                    keep=keep, newer=newer)
    for rec in read_to_end(conn, topic, purpose="compacted"):
        latest.take(rec)
    return latest.table()
