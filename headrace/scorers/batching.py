"""Micro-batching: consume until ``batch_size`` rows, ``max_batch_bytes`` of payload, or
``max_wait_ms`` after the first one.

The consumer hands out messages, and an Arrow message holds many rows: each consume asks for as
many messages as the rows still wanted divided by the rows a message has held lately (a running
average), so a batch of 4096-row messages stops near ``batch_size`` rows instead of taking
``batch_size`` messages.
"""

from __future__ import annotations

import threading
import time
from contextlib import suppress

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.scorers.arrow_limits import stream_rows
from headrace.scorers.stream_io import RawBatch, StreamIO
from headrace.streams.codecs import arrow_flags

IDLE_POLL_S = 0.1  # how long one empty poll may block (bounds SIGTERM and liveness latency)


def rows_in(batch: RawBatch) -> int:
    """JSON: one row a message; Arrow: the rows of its IPC batch (a zero-copy read)."""
    values = batch.values
    rows = len(values)
    if not any(arrow_flags(values)):
        return rows
    for value, arrow in zip(values, arrow_flags(values), strict=True):
        if arrow:
            with suppress(ValidationFailed):  # else one row: it is dead-lettered whole
                rows += stream_rows(value) - 1  # from metadata: a bomb is not decompressed
    return rows


class Batcher:
    def __init__(self, io: StreamIO, *, max_rows: int, max_wait_s: float,
                 max_bytes: int | None = None) -> None:
        self.io = io
        self.max_rows = max_rows
        self.max_bytes = max_bytes  # payload bytes a batch may hold (images are big)
        self.max_wait_s = max_wait_s
        self.assignment_changed = threading.Event()
        self.rows_per_message: float | None = None  # running estimate; 1 for JSON

    def _messages_for(self, rows: int) -> int:
        if self.rows_per_message is None:
            return 1  # nothing seen yet: one message tells how many rows a message holds
        return max(1, int(rows / self.rows_per_message))

    def next_batch(self, stop: threading.Event, *, block: bool = True) -> RawBatch:
        """An empty batch after ``IDLE_POLL_S`` without data, else up to ``max_rows`` rows.

        ``block=False`` (a batch is being decoded ahead): only what is already fetched, at once.
        """
        wait = IDLE_POLL_S if block else 0.0
        batch = self.io.consume_batch(self._messages_for(self.max_rows), wait)
        if not len(batch):
            return batch
        deadline = time.monotonic() + (self.max_wait_s if block else 0.0)
        rows = rows_in(batch)
        self._observe(rows, len(batch))
        limit = self.max_bytes
        size = sum(map(len, batch.values)) if limit else 0
        while rows < self.max_rows and not stop.is_set() and (not limit or size < limit):
            left = deadline - time.monotonic()
            if block and left <= 0:
                break
            more = self.io.consume_batch(self._messages_for(self.max_rows - rows),
                                         min(left, IDLE_POLL_S) if block else 0.0)
            if len(more):
                batch.extend(more)
                got = rows_in(more)
                rows += got
                if limit:
                    size += sum(map(len, more.values))
                self._observe(got, len(more))
            elif not block:
                break
        if self.assignment_changed.is_set():
            batch = self.drop_unassigned(batch)
        return batch

    def _observe(self, rows: int, messages: int) -> None:
        seen = rows / messages
        old = self.rows_per_message
        self.rows_per_message = max(1.0, seen if old is None else 0.5 * old + 0.5 * seen)

    def drop_unassigned(self, batch: RawBatch) -> RawBatch:
        """After a rebalance, forget buffered messages of partitions no longer ours: their new
        owner reads them again from the last committed offset."""
        self.assignment_changed.clear()
        return self.keep_owned(batch)

    def keep_owned(self, batch: RawBatch) -> RawBatch:
        """The messages of partitions this consumer still owns."""
        owned = set(self.io.assignment())
        keep = [(t, p) in owned for t, p in zip(batch.topics, batch.partitions.tolist(),
                                                 strict=True)]
        if all(keep):
            return batch
        return batch.select(np.asarray(keep, bool))
