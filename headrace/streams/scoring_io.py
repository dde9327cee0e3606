"""Kafka I/O for the scoring worker: batch consume, bulk produce, commit, transactions.

The scorer never imports confluent_kafka; every call its loop makes goes through ``StreamIO``.
Consumed messages are handed over column-wise (``RawBatch``) so the worker can stay vectorised.

Delivery errors are collected with ``delivery.report.only.error``: librdkafka calls back only for
failed messages, so the happy path pays no per-message Python callback.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import (
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from headrace.core.errors import FatalError, RetriableError
from headrace.streams.clients import (
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    KafkaConnection,
)
from headrace.streams.contracts import ModelPublished, parse
from headrace.streams.topics import MODEL_EVENTS

log = logging.getLogger(__name__)

# Throughput-oriented producer settings for predictions (bigger linger than the shared default).
SCORER_PRODUCER: dict[str, Any] = {
    "linger.ms": 5,
    "batch.num.messages": 100_000,
    "delivery.report.only.error": True,
}

# Without idempotence, one request in flight keeps each partition's order across retries; a
# retry may still duplicate a prediction, which at-least-once allows and its source offset
# identifies. Measured on the embedded broker (Tansu): ~3x the idempotent producer's MB/s.
NON_IDEMPOTENT: dict[str, Any] = {
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 1,
}


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

    def select(self, keep: np.ndarray) -> RawBatch:
        idx = np.flatnonzero(keep).tolist()
        return RawBatch(
            [self.values[i] for i in idx], [self.keys[i] for i in idx],
            [self.topics[i] for i in idx], self.partitions[idx], self.offsets[idx],
            self.timestamps_ms[idx], [self.sources[i] for i in idx],
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


def _columns(msgs: list[Any]) -> RawBatch:  # Message objects, typed loosely for speed
    """The good messages as columns; partition EOFs skipped, fatal errors raised."""
    errors = list(map(Message.error, msgs))
    if errors.count(None) != len(errors):
        for err in errors:
            if err is None or err.code() == KafkaError._PARTITION_EOF:
                continue
            if err.fatal():
                raise FatalError(f"consumer failed: {err.str()}")
            log.warning("consumer error (retried by the client): %s", err.str())
        msgs = [m for m, e in zip(msgs, errors, strict=True) if e is None]
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
    )


class DeliveryErrors:
    """Collects delivery failures (only failures are reported, see module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            with self._lock:
                self.errors.append(err)

    def take(self) -> list[KafkaError]:
        with self._lock:
            out, self.errors = self.errors, []
        return out


class DeliveryFailed(RetriableError):
    """The broker refused some deliveries: the batch's outputs must be produced again."""


class FlushTimedOut(RetriableError):
    """Outputs still unacknowledged after the flush timeout."""


class CommitAbandoned(RetriableError):
    """The group moved on (rebalance, or a broker that forgot this member): the batch's
    partitions are consumed again from the last committed offsets, so retrying is pointless."""


# Commit errors that no retry can fix: rejoining the group (by polling) is the way forward.
_GROUP_MOVED_ON = {
    KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID,
    KafkaError._ASSIGNMENT_LOST, KafkaError._STATE,
}


class TransactionAborted(RetriableError):
    """The transaction was aborted; the consumer was rewound and the batch must be redone."""


class StreamIO:
    """One consumer and one producer for a scorer, with the calls its loop needs."""

    def __init__(
        self,
        conn: KafkaConnection,
        *,
        group_id: str,
        topics: Sequence[str],
        partitions: Sequence[int] = (),
        transactional_id: str | None = None,
        idempotent: bool = True,
        on_assign: Callable[[list[tuple[str, int]]], None] | None = None,
        on_revoke: Callable[[list[tuple[str, int]]], None] | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.conn = conn
        self.topics = list(topics)
        self.transactional = transactional_id is not None
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._assigned: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self.delivery = DeliveryErrors()
        self.rewinds = 0  # seeks back to the committed offsets: consumed batches are stale
        pconf = {**conn.base(), **PRODUCER_DEFAULTS, **SCORER_PRODUCER,
                 **({} if idempotent or transactional_id else NON_IDEMPOTENT),
                 "on_delivery": self.delivery, **(producer_overrides or {})}
        if transactional_id is not None:
            pconf["transactional.id"] = transactional_id
            pconf["transaction.timeout.ms"] = 60_000
        self._pconf = pconf
        self.producer = Producer(pconf)
        cconf = {**conn.base(), **CONSUMER_DEFAULTS, "group.id": group_id,
                 **(consumer_overrides or {})}
        self.consumer = Consumer(cconf)
        if transactional_id is not None:
            self._txn(lambda: self.producer.init_transactions(conn.timeout_s), "init")
        if partitions:
            tps = [TopicPartition(t, p, OFFSET_INVALID) for t in self.topics for p in partitions]
            self.consumer.assign(tps)  # static ownership: start from the committed offsets
            self._set_assigned([(t, p) for t in self.topics for p in partitions], add=True)
        else:
            self.consumer.subscribe(self.topics, on_assign=self._assign_cb,
                                    on_revoke=self._revoke_cb, on_lost=self._revoke_cb)

    # -- assignment ----------------------------------------------------------------------
    def _set_assigned(self, tps: list[tuple[str, int]], *, add: bool) -> None:
        with self._lock:
            if add:
                self._assigned |= set(tps)
            else:
                self._assigned -= set(tps)

    def _assign_cb(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in parts]
        self._set_assigned(tps, add=True)
        if self._on_assign:
            self._on_assign(tps)

    def _revoke_cb(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in parts]
        if self._on_revoke:
            self._on_revoke(tps)
        self._set_assigned(tps, add=False)

    def assignment(self) -> list[tuple[str, int]]:
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
            raise _classify(exc, "consume") from None
        return _columns(msgs)

    def lag(self) -> dict[tuple[str, int], int]:
        """Per assigned partition: cached high watermark - position (clamped at 0).

        On the embedded broker (Tansu) the high watermark after a multi-record batch is the
        batch's base offset + 1, so this under-reports there; it is right on Apache Kafka.
        """
        out: dict[tuple[str, int], int] = {}
        tps = [TopicPartition(t, p) for t, p in self.assignment()]
        if not tps:
            return out
        try:
            positions = self.consumer.position(tps)
        except KafkaException:
            return out
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

    # -- produce -------------------------------------------------------------------------
    def produce_many(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None],
        headers: list[tuple[str, bytes]],
    ) -> None:
        """Produce one message per value (partitioned by key), waiting when the queue is full."""
        produce: Any = self.producer.produce
        for v, k in zip(values, keys, strict=True):
            while True:
                try:
                    # Positional (partition, on_delivery, callback, timestamp, headers): the
                    # keyword lookup costs ~0.4 us a message, a tenth of the scorer's budget.
                    produce(topic, v, k, -1, None, None, 0, headers)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.poll(0)

    def produce_one(self, topic: str, value: bytes | None, key: bytes | None,
                    headers: list[tuple[str, bytes]]) -> None:
        self.produce_many(topic, [value or b""], [key], headers)

    def flush(self, timeout_s: float) -> None:
        """Wait for every outstanding message; raise if any failed or is still queued."""
        remaining = self.producer.flush(timeout_s)
        errors = self.delivery.take()
        if errors:
            first = errors[0]
            if first.fatal() and not self.transactional:
                # e.g. UNKNOWN_PRODUCER_ID from a broker that lost its producer state: a new
                # idempotent producer is safe, and the caller publishes the batch again.
                self.renew_producer()
                raise DeliveryFailed(f"producer fenced ({first.str()}); renewed it") from None
            if first.fatal():
                raise FatalError(f"delivery failed: {first.str()}")
            raise DeliveryFailed(f"{len(errors)} deliveries failed: {first.str()}")
        if remaining:
            raise FlushTimedOut(f"{remaining} messages not acknowledged within {timeout_s:.1f}s")

    def renew_producer(self) -> None:
        """Replace the producer, dropping what it still holds (the caller publishes again)."""
        if self.transactional:
            return
        old, self.producer = self.producer, Producer(self._pconf)
        old.purge()
        old.poll(0)  # run the purged messages' callbacks now, into the errors we drop
        self.delivery.take()

    def outstanding(self) -> int:
        return len(self.producer)

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
            raise _classify(exc, "commit") from None

    # -- transactions (consume-transform-produce) ----------------------------------------
    def begin(self) -> None:
        self._txn(self.producer.begin_transaction, "begin")

    def commit_transaction(self, offsets: dict[tuple[str, int], int], timeout_s: float) -> None:
        """Send the batch's offsets and commit, following confluent-kafka's eos example.

        1. send_offsets_to_transaction (retriable -> retry);
        2. commit_transaction (retriable -> retry);
        3. txn_requires_abort -> abort, rewind the consumer to its committed offsets, and raise
           ``TransactionAborted`` so the caller redoes the batch; anything else is fatal.
        """
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        meta = self.consumer.consumer_group_metadata()
        try:
            if tps:
                self._retry(lambda: self.producer.send_offsets_to_transaction(
                    tps, meta, timeout_s), timeout_s)
            self._retry(lambda: self.producer.commit_transaction(timeout_s), timeout_s)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.txn_requires_abort():
                self.abort_and_rewind(timeout_s)
                raise TransactionAborted(f"transaction aborted: {err.str()}") from None
            raise FatalError(f"transaction failed: {_reason(exc)}") from None
        self.delivery.take()

    def abort_and_rewind(self, timeout_s: float) -> None:
        self._txn(lambda: self.producer.abort_transaction(timeout_s), "abort")
        self.delivery.take()
        self.rewind_to_committed(timeout_s)

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
            log.warning("cannot read committed offsets to rewind: %s", _reason(exc))
            return
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_INVALID
            try:
                self.consumer.seek(tp)
            except KafkaException as exc:
                log.warning("rewind of %s[%d] failed: %s", tp.topic, tp.partition, _reason(exc))

    def _retry(self, call: Callable[[], Any], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if isinstance(err, KafkaError) and err.retriable() and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise

    def _txn(self, call: Callable[[], Any], what: str) -> None:
        try:
            self._retry(call, self.conn.timeout_s)
        except KafkaException as exc:
            raise FatalError(f"transaction {what} failed: {_reason(exc)}") from None

    # -- shutdown ------------------------------------------------------------------------
    def close(self, *, timeout_s: float) -> None:
        try:
            self.producer.flush(max(0.0, timeout_s))
        finally:
            try:
                self.consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("consumer close: %s", exc)


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)


def _classify(exc: KafkaException, what: str) -> Exception:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.fatal():
        return FatalError(f"{what} failed: {err.str()}")
    return RetriableError(f"{what} failed: {_reason(exc)}")


@dataclass
class ModelEventsListener:
    """Reads ModelPublished events from the end of ``events.models`` (no group, no join delay)."""

    conn: KafkaConnection
    topic: str = MODEL_EVENTS
    _consumer: Consumer | None = field(default=None, init=False, repr=False)

    def open(self) -> None:
        conf = {**self.conn.base(), **CONSUMER_DEFAULTS, "group.id": "headrace-model-watch",
                "enable.auto.commit": False}
        c = Consumer(conf)
        try:
            md = c.list_topics(self.topic, timeout=self.conn.timeout_s)
            t = md.topics.get(self.topic)
            parts = sorted(t.partitions) if t is not None and t.error is None else []
        except KafkaException:
            parts = []
        if not parts:
            c.close()
            raise RetriableError(f"topic {self.topic} is not available")
        c.assign([TopicPartition(self.topic, p, OFFSET_END) for p in parts])
        self._consumer = c

    def poll(self, timeout_s: float) -> list[ModelPublished]:
        if self._consumer is None:
            self.open()
        assert self._consumer is not None
        out: list[ModelPublished] = []
        try:
            msgs = self._consumer.consume(num_messages=100, timeout=timeout_s)
        except KafkaException as exc:
            raise _classify(exc, "model events") from None
        for m in msgs:
            value = m.value()
            if m.error() is not None or not value:
                continue
            try:
                out.append(parse(ModelPublished, value))
            except Exception as exc:
                log.warning("ignoring unreadable model event at offset %s: %s", m.offset(), exc)
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
