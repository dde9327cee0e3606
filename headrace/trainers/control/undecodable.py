"""Record batches the control plane's Kafka client cannot decode are skipped, not fatal.

aiokafka decompresses a fetched batch when its records are first read; a codec it lacks the
library for (lz4, snappy, zstd need ``cramjam``) or a corrupt compressed payload raises from
inside faust's consumer, which stops the app, and the restarted app reads the same batch
again: a crash loop on one record (issue 34: the first lz4 ``events.drift`` record). Here such
a batch yields no records, its offsets are passed over (aiokafka moves past a batch once it
is read), the first one per topic and reason is logged with what to do, and every one is
counted (:func:`skipped`).

:func:`install` swaps aiokafka's ``PartitionRecords`` in its fetcher module for one whose
batches do this; it is idempotent and changes nothing for a batch that decodes.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from aiokafka import codec as aiokafka_codec  # type: ignore[import-untyped]
from aiokafka.consumer import fetcher  # type: ignore[import-untyped]

from headrace.core.rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)
_lock = threading.Lock()
_skipped: Counter[str] = Counter()  # topic -> batches skipped
_lines = RateLimitedLog(log, every_s=math.inf)  # once per topic and kind of error


def skipped() -> dict[str, int]:
    """Batches skipped so far in this process, by topic."""
    with _lock:
        return dict(_skipped)


def note_skipped(topic: str, first: int, last: int, exc: BaseException) -> None:
    """Count one skipped batch; log the first per topic and kind of error."""
    reason = f"{type(exc).__name__}: {exc}"
    with _lock:
        _skipped[topic] += 1
        count = _skipped[topic]
    _lines.error((topic, type(exc).__name__), "skipping an undecodable record batch on %s "
                 "(offsets %d-%d): %s; install the control extra's codecs (pip install "
                 "'headrace[control]': cramjam decodes lz4, snappy and zstd); %d batch(es) "
                 "skipped on %s so far, later ones are counted, not logged",
                 topic, first, last, reason, count, topic)


class _Batch:
    """A record batch whose records, if they cannot be decoded, are none."""

    def __init__(self, topic: str, batch: Any) -> None:
        self._topic = topic
        self._batch = batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __iter__(self) -> Iterator[Any]:
        try:
            records = iter(self._batch)  # decompresses here
            first = next(records, None)
        except Exception as exc:  # any decoding failure: skip the batch, never crash
            note_skipped(self._topic, self._batch.base_offset, self._batch.next_offset - 1,
                         exc)
            return
        # next(), not ``yield from``: aiokafka's C batch refuses a second iter().
        record = first
        while record is not None:
            yield record
            record = next(records, None)


class _Records:
    def __init__(self, topic: str, records: Any) -> None:
        self._topic = topic
        self._records = records

    def has_next(self) -> bool:
        return bool(self._records.has_next())

    def next_batch(self, *args: Any, **kwargs: Any) -> Any:
        batch = self._records.next_batch(*args, **kwargs)
        return None if batch is None else _Batch(self._topic, batch)


class SkippingPartitionRecords(fetcher.PartitionRecords):
    def __init__(self, tp: Any, records: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tp, _Records(tp.topic, records), *args, **kwargs)


def missing_codecs() -> list[str]:
    """The codecs this process's aiokafka cannot decode (cramjam brings lz4, snappy, zstd)."""
    return [c for c in ("gzip", "snappy", "lz4", "zstd")
            if not getattr(aiokafka_codec, f"has_{c}")()]


def install() -> None:
    """Make every aiokafka consumer in this process skip undecodable batches (idempotent),
    and say at start which codecs it lacks."""
    if fetcher.PartitionRecords is SkippingPartitionRecords:
        return
    fetcher.PartitionRecords = SkippingPartitionRecords
    missing = missing_codecs()
    if missing:
        log.error("the control plane's Kafka client cannot decode %s: records so compressed "
                  "will be skipped; pip install 'headrace[control]' (cramjam)",
                  ", ".join(missing))
