"""Micro-batching: consume until ``batch_size`` rows, ``max_batch_bytes`` of decoded bytes, or
``max_wait_ms`` after the first one.

The consumer hands out messages, and an Arrow message holds many rows: each consume asks for as
many messages as the rows still wanted divided by the rows a message has held lately (a running
average), so a batch of 4096-row messages stops near ``batch_size`` rows instead of taking
``batch_size`` messages.

The byte budget counts what the messages cost once decoded (``budget.message_measure``: an Arrow
message from its metadata, anything else its payload). One consume may fetch several messages
at once; a batch that went over the budget is closed before the message that crossed it (a
batch holds at least one message), and the rest is carried to the next batch: consumed, not
yet committed, dropped when the consumer is rewound (it reads them again).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import suppress

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.scorers.engine.stream_io import RawBatch, StreamIO
from headrace.scorers.wire.arrow_limits import read_meta
from headrace.scorers.wire.budget import message_measure
from headrace.streams.codecs import arrow_flags

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1  # how long one empty poll may block (bounds SIGTERM and liveness latency)


def rows_in(batch: RawBatch) -> int:
    """JSON: one row a message; Arrow: the rows of its IPC batch (a zero-copy read)."""
    values = batch.values
    if not any(arrow_flags(values)):
        return len(values)
    return rows_in_values(values)


def rows_in_values(values: list[bytes]) -> int:
    rows = len(values)
    for value, arrow in zip(values, arrow_flags(values), strict=True):
        if arrow:
            with suppress(ValidationFailed):  # else one row: it is dead-lettered whole
                rows += read_meta(value).rows - 1  # from metadata: a bomb is not decompressed
    return rows


class Batcher:
    def __init__(self, io: StreamIO, *, max_rows: int, max_wait_s: float,
                 max_bytes: int | None = None) -> None:
        self.io = io
        self.max_rows = max_rows
        self.max_bytes = max_bytes  # decoded bytes a batch may hold (images, Arrow are big)
        self.input_row_bytes = 0  # the model's decoded input per row (0: float32 a column)
        self.max_wait_s = max_wait_s
        self.assignment_changed = threading.Event()
        self.rows_per_message: float | None = None  # running estimate; 1 for JSON
        self._carry: RawBatch | None = None  # consumed past a closed batch
        self._carry_rewinds = 0
        self._building: RawBatch | None = None  # the batch ``next_batch`` is consuming

    def _messages_for(self, rows: int) -> int:
        if self.rows_per_message is None:
            return 1  # nothing seen yet: one message tells how many rows a message holds
        return max(1, int(rows / self.rows_per_message))

    def costs(self, values: list[bytes]) -> list[int]:
        """Decoded bytes of each message (see the module doc)."""
        return [message_measure(v, a, self.input_row_bytes)[1]
                for v, a in zip(values, arrow_flags(values), strict=True)]

    def measure(self, values: list[bytes]) -> tuple[int, int]:
        """(rows, decoded bytes) of messages; JSON alone costs what ``rows_in`` did."""
        flags = list(arrow_flags(values))
        if not any(flags):
            return len(values), sum(map(len, values)) if self.max_bytes else 0
        rows = size = 0
        for value, arrow in zip(values, flags, strict=True):  # one metadata walk a message
            r, b = message_measure(value, arrow, self.input_row_bytes)
            rows, size = rows + r, size + b
        return rows, size if self.max_bytes else 0

    def _carried(self) -> RawBatch | None:
        carry, self._carry = self._carry, None
        if carry is not None and self.io.rewinds != self._carry_rewinds:
            return None  # rewound to the committed offsets: these are consumed again
        return carry

    def revoked(self, tps: list[tuple[str, int]]) -> None:
        """Partitions taken away (called inside a consume, on the loop's thread): what was
        consumed of them and not handed out yet is dropped, even if the next assignment gives
        them back. Their next owner reads them from the last commit; a message consumed before
        the revocation, committed after it, would move the group's offset to where an earlier
        generation (or a broker that lost its log) had it, past records never scored (D32)."""
        gone = set(tps)
        self.assignment_changed.set()
        held = sum(len(b) for b in (self._building, self._carry) if b is not None)
        if self._building is not None:
            self._building = without(self._building, gone)
        if self._carry is not None:
            self._carry = without(self._carry, gone) or None
        dropped = held - sum(len(b) for b in (self._building, self._carry) if b is not None)
        if dropped:
            log.info("dropped %d consumed messages of revoked partitions: their next owner "
                     "reads them from the last commit", dropped)

    def next_batch(self, stop: threading.Event, *, block: bool = True) -> RawBatch:
        """An empty batch after ``IDLE_POLL_S`` without data, else up to ``max_rows`` rows.

        ``block=False`` (a batch is being decoded ahead): only what is already fetched, at once.
        """
        try:
            return self._next_batch(stop, block)
        finally:
            self._building = None

    def _next_batch(self, stop: threading.Event, block: bool) -> RawBatch:
        wait = IDLE_POLL_S if block else 0.0
        carried = self._carried()
        batch = carried if carried is not None else self.io.consume_batch(
            self._messages_for(self.max_rows), wait)
        if not len(batch):
            return batch
        self._building = batch
        deadline = time.monotonic() + (self.max_wait_s if block else 0.0)
        rows, size = self.measure(batch.values)
        if carried is None:
            self._observe(rows, len(batch))
        limit = self.max_bytes
        while rows < self.max_rows and not stop.is_set() and (not limit or size < limit):
            left = deadline - time.monotonic()
            if block and left <= 0:
                break
            more = self.io.consume_batch(self._messages_for(self.max_rows - rows),
                                         min(left, IDLE_POLL_S) if block else 0.0)
            if self._building is not batch:  # a revocation dropped some of it (``revoked``)
                batch = self._building
                assert batch is not None
                rows, size = self.measure(batch.values)
            if len(more):
                batch.extend(more)
                got, more_size = self.measure(more.values)
                rows += got
                size += more_size
                self._observe(got, len(more))
            elif not block:
                break
        if self.assignment_changed.is_set():
            kept = self.keep_owned_mask(batch)
            self.assignment_changed.clear()
            if kept is not None:
                batch = batch.select(kept)
        if limit and size > limit and len(batch) > 1:
            batch = self._close_early(batch, limit)
        return batch

    def _close_early(self, batch: RawBatch, limit: int) -> RawBatch:
        """The longest prefix within ``limit`` (at least one message); the rest is carried."""
        fits = int(np.searchsorted(np.cumsum(self.costs(batch.values)), limit, side="right"))
        cut = max(1, fits)
        if cut >= len(batch):
            return batch
        keep = np.zeros(len(batch), bool)
        keep[:cut] = True
        self._carry, self._carry_rewinds = batch.select(~keep), self.io.rewinds
        return batch.select(keep)

    def _observe(self, rows: int, messages: int) -> None:
        seen = rows / messages
        old = self.rows_per_message
        self.rows_per_message = max(1.0, seen if old is None else 0.5 * old + 0.5 * seen)

    def keep_owned_mask(self, batch: RawBatch) -> np.ndarray | None:
        """Which messages are of partitions this consumer still owns (None: all); after a
        rebalance the others are forgotten: their new owner reads them from the last commit."""
        owned = set(self.io.assignment())
        keep = [(t, p) in owned for t, p in zip(batch.topics, batch.partitions.tolist(),
                                                 strict=True)]
        return None if all(keep) else np.asarray(keep, bool)

    def keep_owned(self, batch: RawBatch, revoked: set[tuple[str, int]] | None = None
                   ) -> RawBatch:
        """The messages of partitions this consumer still owns and that were not ``revoked``
        since they were consumed (see ``revoked``)."""
        if revoked:
            batch = without(batch, revoked)
        keep = self.keep_owned_mask(batch)
        return batch if keep is None else batch.select(keep)


def without(batch: RawBatch, gone: set[tuple[str, int]]) -> RawBatch:
    """``batch`` less the messages of the ``gone`` partitions (itself when none is)."""
    if not len(batch) or not gone:
        return batch
    keep = np.fromiter(((t, p) not in gone for t, p in zip(
        batch.topics, batch.partitions.tolist(), strict=True)), bool, len(batch))
    return batch if keep.all() else batch.select(keep)
