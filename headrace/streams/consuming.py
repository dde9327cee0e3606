"""Consuming from Kafka: a batch consumer and the columnar batch it hands over.

Consumed messages are handed over column-wise (``RawBatch``) so that a caller (the scorer) can
stay vectorised; the consumer keeps what it owns (group subscription or static assignment),
commits synchronously, and rewinds to the committed offsets when a batch must be redone.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from headrace.core.errors import RetriableError
from headrace.streams.client_errors import classify, good_messages, reason
from headrace.streams.clients import KafkaConnection

log = logging.getLogger(__name__)


@dataclass
class RawBatch:
    """Consumed messages as parallel columns (one entry per message).

    Headers are not read on the hot path (``Message.headers()`` costs ~25x ``value()``):
    ``sources`` keeps what can produce them, and only dead letters ask (``headers_of``).
    """

    values: list[bytes]
    keys: list[bytes | None]
    topics: list[str]
    partitions: np.ndarray  # int32
    offsets: np.ndarray  # int64
    timestamps_ms: np.ndarray  # int64 CreateTime (or LogAppendTime), -1 when absent
    sources: list[Any]  # per message: a consumed Message, or its headers as a list (or None)
    received_ms: float = -1.0  # wall clock when the first of these was consumed; -1 unknown

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def empty(cls) -> RawBatch:
        return cls([], [], [], np.zeros(0, np.int32), np.zeros(0, np.int64),
                   np.zeros(0, np.int64), [])

    def headers_of(self, i: int) -> list[tuple[str, bytes]]:
        src = self.sources[i]
        if src is None or isinstance(src, list):
            return list(src or ())
        return list(src.headers() or ())

    def extend(self, other: RawBatch) -> None:
        self.values += other.values
        self.keys += other.keys
        self.topics += other.topics
        self.partitions = np.concatenate([self.partitions, other.partitions])
        self.offsets = np.concatenate([self.offsets, other.offsets])
        self.timestamps_ms = np.concatenate([self.timestamps_ms, other.timestamps_ms])
        self.sources += other.sources
        if self.received_ms < 0:
            self.received_ms = other.received_ms

    def select(self, keep: np.ndarray) -> RawBatch:
        idx = np.flatnonzero(keep).tolist()
        return RawBatch(
            [self.values[i] for i in idx], [self.keys[i] for i in idx],
            [self.topics[i] for i in idx], self.partitions[idx], self.offsets[idx],
            self.timestamps_ms[idx], [self.sources[i] for i in idx], self.received_ms,
        )

    def single_topic(self) -> str | None:
        """The topic of every message, if they share one (always, for a scorer)."""
        topics = self.topics
        return topics[0] if topics and topics.count(topics[0]) == len(topics) else None

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> last offset + 1: what to commit once the batch is done."""
        out: dict[tuple[str, int], int] = {}
        topic = self.single_topic()
        if topic is not None:  # vectorised
            order = np.lexsort((self.offsets, self.partitions))
            parts, offs = self.partitions[order], self.offsets[order]
            last = np.flatnonzero(np.r_[parts[1:] != parts[:-1], True])
            return {(topic, p): o + 1
                    for p, o in zip(parts[last].tolist(), offs[last].tolist(), strict=True)}
        for t, p, o in zip(self.topics, self.partitions.tolist(), self.offsets.tolist(),
                           strict=True):
            if o + 1 > out.get((t, p), -1):
                out[(t, p)] = o + 1
        return out


_second = operator.itemgetter(1)


def from_messages(msgs: list[Any]) -> RawBatch:
    """Consumed ``Message`` objects (read by any consumer) as a ``RawBatch``."""
    return _columns(msgs)


def _columns(msgs: list[Any], on_error: Callable[[KafkaError], object] | None = None
             ) -> RawBatch:  # Message objects, typed loosely for speed
    """The good messages as columns; error events classified by ``client_errors`` (EOF
    skipped, retriable logged, fatal raised). No ``KafkaError`` is compared to None with ``==``
    (``KafkaError.__eq__(None)`` raises; ``errors.count(None)`` was a ``SystemError``)."""
    # any(): truthiness, not ==: None is false, a KafkaError true. Rare: only then a rebuild.
    if any(map(Message.error, msgs)):
        msgs = good_messages(msgs, on_error=on_error)
    n = len(msgs)
    # map() over the C methods, not comprehensions (each a Python frame per message).
    values: list[Any] = list(map(Message.value, msgs))
    if None in values:  # a tombstone: an empty payload (dead-lettered as such)
        values = [v or b"" for v in values]
    getter: Any = Message  # typeshed's Message methods are generic; these are plain bytes/str
    return RawBatch(
        values,
        list(map(getter.key, msgs)),
        list(map(getter.topic, msgs)),
        np.fromiter(map(getter.partition, msgs), np.int32, n),
        np.fromiter(map(getter.offset, msgs), np.int64, n),
        # (type, ms); librdkafka gives -1 ms when there is none.
        np.fromiter(map(_second, map(getter.timestamp, msgs)), np.int64, n),
        msgs,
        time.time() * 1000.0 if n else -1.0,
    )


class CommitAbandoned(RetriableError):
    """The group moved on (rebalance, or a broker that forgot this member): the batch's
    partitions are consumed again from the last committed offsets, so retrying is pointless."""


# Commit errors that no retry can fix: rejoining the group (by polling) is the way forward.
_GROUP_MOVED_ON = {
    KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID,
    KafkaError._ASSIGNMENT_LOST, KafkaError._STATE,
}

Partitions = list[tuple[str, int]]


def _names(tps: Partitions) -> str:
    """``topic[0,2]`` per topic: what a member holds, in one short log field."""
    by: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by.setdefault(t, []).append(p)
    return ", ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in by.items()) or "none"


class BatchConsumer:
    """A consumer in a group: by subscription (rebalanced) or by static ``partitions``."""

    def __init__(
        self,
        conn: KafkaConnection,
        *,
        group_id: str,
        topics: Sequence[str],
        partitions: Sequence[int] = (),
        on_assign: Callable[[Partitions], None] | None = None,
        on_revoke: Callable[[Partitions], None] | None = None,
        on_error: Callable[[KafkaError], object] | None = None,
        **overrides: Any,
    ) -> None:
        self.conn = conn
        self._on_error = on_error  # sees each consumer error event that is not informational
        self.topics = list(topics)
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._assigned: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self.rewinds = 0  # seeks back to the committed offsets: consumed batches are stale
        self.positions_seen: dict[tuple[str, int], int] = {}  # by ``lag`` (the loop's thread)
        self.consumer = Consumer(conn.consumer_config(group_id, **overrides))
        if partitions:
            tps = [TopicPartition(t, p, OFFSET_INVALID) for t in self.topics for p in partitions]
            self.consumer.assign(tps)  # static ownership: start from the committed offsets
            self._set_assigned([(t, p) for t in self.topics for p in partitions], add=True)
        else:
            self.consumer.subscribe(self.topics, on_assign=self._assign_cb,
                                    on_revoke=self._revoke_cb, on_lost=self._revoke_cb)

    # -- assignment ----------------------------------------------------------------------
    def _set_assigned(self, tps: Partitions, *, add: bool) -> None:
        with self._lock:
            if add:
                self._assigned |= set(tps)
            else:
                self._assigned -= set(tps)

    def _assign_cb(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in parts]
        self._set_assigned(tps, add=True)
        log.info("partitions assigned: %s; holding %s", _names(tps), _names(self.assignment()))
        if self._on_assign:
            self._on_assign(tps)

    def _revoke_cb(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in parts]
        if self._on_revoke:
            self._on_revoke(tps)
        self._set_assigned(tps, add=False)
        log.info("partitions revoked: %s; holding %s", _names(tps), _names(self.assignment()))

    def assignment(self) -> Partitions:
        with self._lock:
            return sorted(self._assigned)

    # -- consume -------------------------------------------------------------------------
    def consume_batch(self, max_messages: int, timeout_s: float) -> RawBatch:
        """Up to ``max_messages``: what is already fetched, else the first message to arrive
        within ``timeout_s`` together with whatever came with it.

        ``Consumer.consume(n, t)`` waits for all ``n`` messages or the whole ``t``: at a trickle
        that is a fixed ``t`` of latency on every batch, so the wait is a ``poll`` for one.
        """
        n = max(1, max_messages)
        try:
            msgs = self.consumer.consume(num_messages=n, timeout=0)
            if not msgs:
                first = self.consumer.poll(timeout_s)
                if first is None:
                    return RawBatch.empty()
                msgs = [first]
                if n > 1:
                    msgs += self.consumer.consume(num_messages=n - 1, timeout=0)
        except KafkaException as exc:
            raise classify(exc, "consume") from None
        return _columns(msgs, self._on_error)

    def lag(self) -> dict[tuple[str, int], int]:
        """Per assigned partition: cached high watermark - position (clamped at 0).

        On the embedded broker (Tansu) the high watermark after a multi-record batch is the
        batch's base offset + 1, so this under-reports there; it is right on Apache Kafka.
        """
        out: dict[tuple[str, int], int] = {}
        tps = [TopicPartition(t, p) for t, p in self.assignment()]
        if not tps:
            self.positions_seen = {}
            return out
        try:
            positions = self.consumer.position(tps)
        except KafkaException:
            return out
        # For the stall check (``GroupLag``), read on another thread: a plain dict swapped whole.
        self.positions_seen = {(tp.topic, tp.partition): int(tp.offset) for tp in positions}
        for tp in positions:
            try:
                _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high is None or high < 0 or tp.offset < 0:
                continue
            out[(tp.topic, tp.partition)] = max(0, int(high) - int(tp.offset))
        return out

    def committed(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        tps = self.consumer.committed([TopicPartition(topic, p) for p in partitions],
                                      timeout=self.conn.timeout_s)
        return {tp.partition: tp.offset for tp in tps}

    # -- commit (at-least-once) ----------------------------------------------------------
    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        if not offsets:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            self.consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError._NO_OFFSET:
                return
            if isinstance(err, KafkaError) and err.code() in _GROUP_MOVED_ON:
                raise CommitAbandoned(f"commit abandoned: {err.str()}") from None
            raise classify(exc, "commit") from None

    def rewind_to_committed(self, timeout_s: float = 10.0) -> None:
        """Seek every assigned partition back to its committed offset (best effort: a
        rebalance does the same for partitions this member loses)."""
        self.rewinds += 1
        tps = [TopicPartition(t, p) for t, p in self.assignment()]
        if not tps:
            return
        try:
            committed = self.consumer.committed(tps, timeout=timeout_s)
        except KafkaException as exc:
            log.warning("cannot read committed offsets to rewind: %s", reason(exc))
            return
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_INVALID
            try:
                self.consumer.seek(tp)
            except KafkaException as exc:
                log.warning("rewind of %s[%d] failed: %s", tp.topic, tp.partition, reason(exc))

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("consumer close: %s", exc)
