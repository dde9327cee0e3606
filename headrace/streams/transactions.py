"""Consume-transform-produce in Kafka transactions, after confluent-kafka's eos example.

Errors fall in its three classes: retriable -> retry with backoff; ``txn_requires_abort`` ->
abort, rewind the consumer to its committed offsets and redo the batch
(``TransactionAborted``); anything else -> ``FatalError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from headrace.core.errors import FatalError, RetriableError
from headrace.streams.clients import reason
from headrace.streams.consuming import BatchConsumer
from headrace.streams.producing import BatchProducer


class TransactionAborted(RetriableError):
    """The transaction was aborted; the consumer was rewound and the batch must be redone."""


class Transactions:
    """The transactional producer's calls, bound to the consumer whose offsets it commits."""

    def __init__(self, producer: BatchProducer, consumer: BatchConsumer) -> None:
        self.producer = producer
        self.consumer = consumer
        self._timeout_s = producer.conn.timeout_s
        self._call(lambda: producer.producer.init_transactions(self._timeout_s), "init")

    def begin(self) -> None:
        self._call(self.producer.producer.begin_transaction, "begin")

    def commit(self, offsets: dict[tuple[str, int], int], timeout_s: float) -> None:
        """Send the batch's offsets and commit.

        1. send_offsets_to_transaction (retriable -> retry);
        2. commit_transaction (retriable -> retry);
        3. txn_requires_abort -> abort, rewind the consumer to its committed offsets, and raise
           ``TransactionAborted`` so the caller redoes the batch; anything else is fatal.
        """
        p = self.producer.producer
        tps = [TopicPartition(t, part, o) for (t, part), o in offsets.items()]
        meta = self.consumer.consumer.consumer_group_metadata()
        try:
            if tps:
                _retry(lambda: p.send_offsets_to_transaction(tps, meta, timeout_s), timeout_s)
            _retry(lambda: p.commit_transaction(timeout_s), timeout_s)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.txn_requires_abort():
                self.abort_and_rewind(timeout_s)
                raise TransactionAborted(f"transaction aborted: {err.str()}") from None
            raise FatalError(f"transaction failed: {reason(exc)}") from None
        self.producer.deliveries.take()

    def abort_and_rewind(self, timeout_s: float) -> None:
        self._call(lambda: self.producer.producer.abort_transaction(timeout_s), "abort")
        self.producer.deliveries.take()
        self.consumer.rewind_to_committed(timeout_s)

    def _call(self, call: Callable[[], Any], what: str) -> None:
        try:
            _retry(call, self._timeout_s)
        except KafkaException as exc:
            raise FatalError(f"transaction {what} failed: {reason(exc)}") from None


def _retry(call: Callable[[], Any], timeout_s: float, *,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> None:
    """Call until it succeeds; a retriable error is retried with backoff (0.05 s doubling to
    1 s) until ``timeout_s`` has passed, then raised like any other."""
    deadline = clock() + timeout_s
    delay = 0.05
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.retriable() and clock() < deadline:
                sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            raise
