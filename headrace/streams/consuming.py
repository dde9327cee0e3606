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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
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
from headrace.streams.client_errors import check_event, classify, good_messages, reason
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
    # The consumer's ``takeaways`` when the first of these was consumed (None: not known): a
    # partition taken away since then must not have these offsets committed.
    consumed_at: int | None = None

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
        if self.consumed_at is None or (other.consumed_at is not None
                                        and other.consumed_at < self.consumed_at):
            self.consumed_at = other.consumed_at

    def select(self, keep: np.ndarray) -> RawBatch:
        idx = np.flatnonzero(keep).tolist()
        return RawBatch(
            [self.values[i] for i in idx], [self.keys[i] for i in idx],
            [self.topics[i] for i in idx], self.partitions[idx], self.offsets[idx],
            self.timestamps_ms[idx], [self.sources[i] for i in idx], self.received_ms,
            self.consumed_at,
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
        self._held: set[tuple[str, int]] = set()  # paused by ``hold`` until ``release``
        self._static = bool(partitions)  # no group membership to keep
        self._in_rebalance = False  # inside a rebalance callback (a poll): no poll of our own
        # Partitions taken away (revoked or lost), counted; each partition's count when it was
        # last taken: a batch consumed before that has no offsets of it to commit (``commit``).
        self.takeaways = 0
        self._taken_at: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self.rewinds = 0  # seeks back to the committed offsets: consumed batches are stale
        self.positions_seen: dict[tuple[str, int], int] = {}  # by ``lag`` (the loop's thread)
        config = conn.consumer_config(group_id, **overrides)
        self.consumer = Consumer(config)
        # ``hold`` polls once this long has passed since the last poll: each step of a
        # rebalance waits for the member's next poll, and a member that goes
        # max.poll.interval.ms without one leaves its group.
        self.hold_after_s = min(
            1.0, float(config.get("max.poll.interval.ms", 300_000)) / 3000.0)
        self._last_poll = time.monotonic()
        if partitions:
            tps = [TopicPartition(t, p, OFFSET_INVALID) for t in self.topics for p in partitions]
            self.consumer.assign(tps)  # static ownership: start from the committed offsets
            self._set_assigned([(t, p) for t in self.topics for p in partitions], add=True)
        else:
            self.consumer.subscribe(self.topics, on_assign=self._assign_cb,
                                    on_revoke=self._revoke_cb, on_lost=self._lost_cb)

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
            with self._rebalancing():
                self._on_assign(tps)

    def _revoke_cb(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._hand_back([(tp.topic, tp.partition) for tp in parts], lost=False)

    def _lost_cb(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        """Partitions lost (the group went on without this member, or the broker forgot the
        group): already another's, so the batch in flight commits none of their offsets."""
        tps = [(tp.topic, tp.partition) for tp in parts]
        log.warning("partitions lost: %s", _names(tps))
        self._hand_back(tps, lost=True)

    def _hand_back(self, tps: Partitions, *, lost: bool) -> None:
        self._resume(self._held & set(tps))  # never handed on (or back) paused
        if lost:
            self._taken(tps)
        try:
            if self._on_revoke:  # the scorer delivers and commits its batch in flight here
                with self._rebalancing():
                    self._on_revoke(tps)
        finally:
            if not lost:  # after: revoked partitions are still ours inside the callback
                self._taken(tps)
        self._set_assigned(tps, add=False)
        log.info("partitions revoked: %s; holding %s", _names(tps), _names(self.assignment()))

    @contextmanager
    def _rebalancing(self) -> Iterator[None]:
        """Inside a rebalance callback (a poll): ``hold`` must not poll again."""
        self._in_rebalance = True
        try:
            yield
        finally:
            self._in_rebalance = False

    def _taken(self, tps: Partitions) -> None:
        self.takeaways += 1
        for tp in tps:
            self._taken_at[tp] = self.takeaways

    def assignment(self) -> Partitions:
        with self._lock:
            return sorted(self._assigned)

    # -- staying in the group while the caller waits -------------------------------------
    def hold(self) -> None:
        """Keep this member in its group without taking records, while the caller waits on
        something else (a flush or commit retried through a broker outage).

        A member that does not poll for ``max.poll.interval.ms`` leaves its group; after a
        broker restart every member of a group waited at once and all of them left it (D45).
        Once ``hold_after_s`` has passed since the last poll (a short wait pauses nothing: a
        pause drops what was fetched ahead), this pauses what the member holds and polls once,
        which serves a rebalance; a record the poll returns anyway (from a partition assigned
        inside it) is put back (sought to) and its partition paused too, so nothing is
        skipped. ``release`` resumes them. Call it at least every second while waiting.
        """
        if (self._static or self._in_rebalance
                or time.monotonic() - self._last_poll < self.hold_after_s):
            return
        self._last_poll = time.monotonic()
        try:
            fresh = [tp for tp in self.assignment() if tp not in self._held]
            if fresh:
                self.consumer.pause([TopicPartition(t, p) for t, p in fresh])
                self._held.update(fresh)
            msg = self.consumer.poll(0)
        except KafkaException as exc:
            log.warning("cannot keep the group membership while waiting: %s", reason(exc))
            return
        if msg is None:
            return
        err = msg.error()
        if err is not None:
            check_event(err, on_error=self._on_error)
            return
        got: Any = msg  # a record: its topic, partition and offset are set
        back = TopicPartition(got.topic(), got.partition(), got.offset())
        try:
            self.consumer.seek(back)
            self.consumer.pause([TopicPartition(back.topic, back.partition)])
            self._held.add((back.topic, back.partition))
        except KafkaException as exc:  # the record would be skipped: read all from the commits
            log.warning("cannot put back %s[%d]@%d (%s); rewinding to the committed offsets",
                        back.topic, back.partition, back.offset, reason(exc))
            self.rewind_to_committed()

    def release(self) -> None:
        """Resume what ``hold`` paused and this member still holds."""
        if self._held:
            self._resume(self._held & set(self.assignment()))
            self._held.clear()

    def _resume(self, tps: set[tuple[str, int]]) -> None:
        if not tps:
            return
        self._held -= tps
        try:
            self.consumer.resume([TopicPartition(t, p) for t, p in sorted(tps)])
        except KafkaException as exc:  # a partition left paused shows as a stall on the probes
            log.warning("cannot resume %s: %s", _names(sorted(tps)), reason(exc))

    # -- consume -------------------------------------------------------------------------
    def consume_batch(self, max_messages: int, timeout_s: float) -> RawBatch:
        """Up to ``max_messages``: what is already fetched, else the first message to arrive
        within ``timeout_s`` together with whatever came with it.

        ``Consumer.consume(n, t)`` waits for all ``n`` messages or the whole ``t``: at a trickle
        that is a fixed ``t`` of latency on every batch, so the wait is a ``poll`` for one.
        """
        n = max(1, max_messages)
        self._last_poll = time.monotonic()
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
        batch = _columns(msgs, self._on_error)
        batch.consumed_at = self.takeaways  # after the calls: a revocation inside them is past
        return batch

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

    def taken_since(self, tps: Iterable[tuple[str, int]], consumed_at: int) -> Partitions:
        """Those of ``tps`` taken away (revoked or lost) after a batch's ``consumed_at``: their
        offsets from that batch are no longer this member's to commit (D66)."""
        return sorted(tp for tp in tps if self._taken_at.get(tp, 0) > consumed_at)

    # -- commit (at-least-once) ----------------------------------------------------------
    def commit(self, offsets: dict[tuple[str, int], int], *, consumed_at: int | None = None
               ) -> None:
        """Commit ``offsets`` (synchronously). ``consumed_at``: the batch's ``consumed_at``;
        the offsets of a partition taken away since then are left out."""
        if consumed_at is not None:
            stale = self.taken_since(offsets, consumed_at)
            if stale:
                # Taken away (a rebalance, a lost membership, a broker restart) after the batch
                # was consumed: its offsets may not even be of the log there now (a broker that
                # lost its data). Their owner, maybe this member again, reads from the last
                # commit (at-least-once).
                log.warning("not committing %s: taken away after the batch was consumed",
                            _names(sorted(stale)))
                offsets = {tp: o for tp, o in offsets.items() if tp not in stale}
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
