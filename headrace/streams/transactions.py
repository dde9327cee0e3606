"""Consume-transform-produce in Kafka transactions, after confluent-kafka's eos example.

Errors fall in three classes: ``txn_requires_abort`` -> abort, rewind the consumer to its
committed offsets and redo the batch (``TransactionAborted``); fatal -> ``FatalError``; and a
commit (or abort) that timed out, whose outcome is unknown.

An unknown outcome is never retried: a commit retried after a timeout is how lost and duplicated
writes were traced in a Kafka-compatible system, and librdkafka lacks KIP-890's guard against
a late write of one transaction joining the next. Instead the producer is recreated with the
same transactional.id: its ``init_transactions`` fences the old instance and settles the old
transaction (the coordinator completes a commit it had prepared, aborts one still open); only
then is the consumer rewound to its committed offsets, which now say which it was, and the batch
redone if it was aborted. So each input still has exactly one committed output.

While the commit waits, the consumer stays in its group (``BatchConsumer.hold``, D65), and a
batch with a partition taken away after it was consumed is aborted, never committed (D66): its
outputs would otherwise be committed while the partition's next owner scores it again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from headrace.core.errors import FatalError, RetriableError
from headrace.streams.clients import reason
from headrace.streams.consuming import BatchConsumer
from headrace.streams.producing import BatchProducer

log = logging.getLogger(__name__)

# The longest a commit_transaction call may block: under the consumer's max.poll.interval.ms
# (10 s), since the member cannot poll meanwhile; past it the outcome is unknown.
COMMIT_WAIT_S = 5.0
# How long an abort may take before its outcome counts as unknown too.
ABORT_WAIT_S = 5.0
# ``init_transactions`` of a recreated producer is called in slices this long, holding the
# group between them (a timed-out init resumes where it was).
INIT_SLICE_S = 1.0


class TransactionAborted(RetriableError):
    """The transaction was aborted (or its outcome was unknown and the producer recreated); the
    consumer was rewound and the batch must be redone."""


class Transactions:
    """The transactional producer's calls, bound to the consumer whose offsets it commits."""

    def __init__(self, producer: BatchProducer, consumer: BatchConsumer) -> None:
        self.producer = producer
        self.consumer = consumer
        self._timeout_s = producer.conn.timeout_s
        self._call(lambda: producer.producer.init_transactions(self._timeout_s), "init")
        self._ready = True  # False: a recreated producer still to initialise
        self.recreated = 0  # producers recreated after an unknown outcome

    def begin(self) -> None:
        """Begin a transaction; a recreated producer is initialised first, and the batch in
        hand (consumed before the old transaction settled) is dropped: ``TransactionAborted``."""
        if not self._ready:
            self._settle("the last transaction's outcome was unknown")
        self._call(self.producer.producer.begin_transaction, "begin")

    def commit(self, offsets: dict[tuple[str, int], int], timeout_s: float, *,
               consumed_at: int | None = None) -> None:
        """Wait for the batch's outputs, send its offsets and commit.

        1. flush, holding the group (D65); a failed or timed-out delivery -> abort;
        2. a partition taken away since ``consumed_at`` (before or during the flush) -> abort
           (D66);
        3. send_offsets_to_transaction (retriable -> retry, holding); commit_transaction once;
        4. ``txn_requires_abort`` -> abort, rewind, ``TransactionAborted``; a commit that
           timed out -> recreate the producer, rewind, ``TransactionAborted``; fatal ->
           ``FatalError``.
        """
        deadline = time.monotonic() + timeout_s
        try:
            self._commit(offsets, deadline, consumed_at)
        finally:
            self.consumer.release()  # what the waits paused

    def _commit(self, offsets: dict[tuple[str, int], int], deadline: float,
                consumed_at: int | None) -> None:
        try:
            self.producer.flush(max(0.5, deadline - time.monotonic()), keep=self.consumer.hold)
        except RetriableError as exc:  # lost or unacknowledged outputs: never committed
            self._abort(f"delivery failed: {exc}")
        # After the flush, whose holds may have served a rebalance: the group metadata read
        # below is the new generation's, which the coordinator would accept for them.
        if consumed_at is not None:
            stale = self.consumer.taken_since(offsets, consumed_at)
            if stale:
                where = ", ".join(f"{t}[{p}]" for t, p in stale)
                self._abort(f"{where} taken away after the batch was consumed")
        p = self.producer.producer
        tps = [TopicPartition(t, part, o) for (t, part), o in offsets.items()]
        meta = self.consumer.consumer.consumer_group_metadata()
        try:
            if tps:
                left = max(0.5, deadline - time.monotonic())
                _retry(lambda: p.send_offsets_to_transaction(tps, meta, min(left, COMMIT_WAIT_S)),
                       left, keep=self.consumer.hold)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and (err.txn_requires_abort() or err.retriable()):
                self._abort(f"sending the offsets failed: {reason(exc)}")
            raise FatalError(f"transaction failed: {reason(exc)}") from None
        try:
            p.commit_transaction(min(max(1.0, deadline - time.monotonic()), COMMIT_WAIT_S))
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.txn_requires_abort():
                self._abort(f"commit failed: {err.str()}")
            if isinstance(err, KafkaError) and err.retriable():
                self._recreate(f"commit outcome unknown ({err.str()})")
            raise FatalError(f"transaction failed: {reason(exc)}") from None
        self.producer.deliveries.take()

    def abort_and_rewind(self, timeout_s: float) -> None:
        """Abort the open transaction and rewind; an abort that times out recreates the
        producer (either way the batch is consumed again)."""
        with contextlib.suppress(TransactionAborted):
            self._abort("aborted by the caller", wait_s=timeout_s)

    def _abort(self, why: str, *, wait_s: float = ABORT_WAIT_S) -> None:
        """Abort, drop the batch's delivery reports, rewind; raise ``TransactionAborted``."""
        try:
            _retry(lambda: self.producer.producer.abort_transaction(wait_s), wait_s)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.retriable():
                self._recreate(f"{why}; its abort timed out ({err.str()})")
            raise FatalError(f"transaction abort failed: {reason(exc)}") from None
        self.producer.deliveries.take()
        self.consumer.rewind_to_committed(self._timeout_s)
        raise TransactionAborted(f"transaction aborted: {why}")

    def _recreate(self, why: str) -> None:
        """The old transaction's outcome is unknown: a new producer, which settles it once
        initialised; the consumer rewound then. Raises ``TransactionAborted``."""
        self.recreated += 1
        log.warning("%s; recreating the transactional producer instead of retrying", why)
        try:  # best effort: the coordinator may still be unreachable, or the commit prepared
            self.producer.producer.abort_transaction(1.0)
        except KafkaException as exc:
            log.info("abort before recreating the producer: %s", reason(exc))
        self.producer.recreate()
        self._ready = False
        self._settle(why)

    def _settle(self, why: str) -> None:
        """Initialise the recreated producer (holding the group), then rewind. Raises
        ``TransactionAborted`` whether or not the init finished in time: the batch in hand is
        redone; until it finishes the consumer is rewound again at each try."""
        deadline = time.monotonic() + self._timeout_s
        p = self.producer.producer
        delay = 0.05
        while True:
            left = deadline - time.monotonic()
            try:
                p.init_transactions(max(0.1, min(left, INIT_SLICE_S)))
                break
            except KafkaException as exc:
                err = exc.args[0]
                if not (isinstance(err, KafkaError) and err.retriable()):
                    raise FatalError(f"transaction init failed: {reason(exc)}") from None
                if left <= 0:
                    self.consumer.rewind_to_committed(self._timeout_s)
                    raise TransactionAborted(
                        f"{why}; the new producer is not initialised yet ({err.str()}): the "
                        "batch is consumed again") from None
                self.consumer.hold()
                time.sleep(delay)  # an init refused at once (no broker) must not spin
                delay = min(delay * 2, 1.0)
        self._ready = True
        # Only now do the committed offsets say whether the old transaction committed.
        self.consumer.rewind_to_committed(self._timeout_s)
        raise TransactionAborted(f"{why}; producer recreated, the batch is consumed again from "
                                 "the committed offsets")

    def _call(self, call: Callable[[], Any], what: str) -> None:
        try:
            _retry(call, self._timeout_s)
        except KafkaException as exc:
            raise FatalError(f"transaction {what} failed: {reason(exc)}") from None


def _retry(call: Callable[[], Any], timeout_s: float, *,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep,
           keep: Callable[[], None] | None = None) -> None:
    """Call until it succeeds; a retriable error is retried with backoff (0.05 s doubling to
    1 s) until ``timeout_s`` has passed, then raised like any other (``keep``: called before
    each wait, so a consumer stays in its group)."""
    deadline = clock() + timeout_s
    delay = 0.05
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.retriable() and clock() < deadline:
                if keep is not None:
                    keep()
                sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            raise
