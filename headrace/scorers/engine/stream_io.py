"""The scorer's Kafka I/O: one batch consumer and one producer, with the calls its loop needs.

Built from the client layer in ``headrace.streams`` (the scorer never imports confluent_kafka):
the producer settings for predictions, the choice between idempotent, non-idempotent and
transactional delivery, and the model-events listener are the scorer's; consuming, producing,
delivery tracking and the transaction protocol are the streams layer's.

Delivery errors are collected with ``delivery.report.only.error``: librdkafka calls back only for
failed messages, so the happy path pays no per-message Python callback.
"""

from __future__ import annotations

import logging
from typing import Any

from headrace.contracts import ModelPublished, parse
from headrace.core.bad_records import BadRecords
from headrace.streams.clients import KafkaConnection
from headrace.streams.consuming import BatchConsumer, CommitAbandoned, RawBatch
from headrace.streams.producing import BatchProducer, DeliveryFailed, FlushTimedOut
from headrace.streams.reading import Follower
from headrace.streams.topics import MODEL_EVENTS
from headrace.streams.transactions import TransactionAborted, Transactions

log = logging.getLogger(__name__)

__all__ = ["NON_IDEMPOTENT", "SCORER_PRODUCER", "CommitAbandoned", "DeliveryFailed",
           "FlushTimedOut", "ModelEventsListener", "RawBatch", "StreamIO", "TransactionAborted"]

# Throughput-oriented producer settings for predictions (bigger linger than the shared default).
# lz4: a prediction repeats its source topic, key, model and version, so the broker takes a
# fraction of the bytes; on the embedded broker a shadow's Arrow predictions cost the machine
# ~25% less CPU a row (bench_scoring --shadow-only). An operator's compression.type wins.
SCORER_PRODUCER: dict[str, Any] = {
    "linger.ms": 5,
    "batch.num.messages": 100_000,
    "delivery.report.only.error": True,
    "compression.type": "lz4",
    # The scorer creates its topics (at start, and again when gone: ``TopicKeeper``) with their
    # partitions and config; a produce that auto-created them got the broker's default
    # partition count (4 on Tansu) and no compaction for control.lineage (D42).
    "allow.auto.create.topics": False,
}

# Without idempotence, one request in flight keeps each partition's order across retries; a
# retry may still duplicate a prediction, which at-least-once allows and its source offset
# identifies. Measured on the embedded broker (Tansu): ~3x the idempotent producer's MB/s.
NON_IDEMPOTENT: dict[str, Any] = {
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 1,
}


class StreamIO:
    """One consumer and one producer for a scorer, with the calls its loop needs."""

    def __init__(
        self,
        conn: KafkaConnection,
        consumer: BatchConsumer,
        *,
        transactional_id: str | None = None,
        idempotent: bool = True,
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.conn = conn
        self.topics = consumer.topics
        self.transactional = transactional_id is not None
        self._producer = BatchProducer(
            conn, transactional_id=transactional_id,
            **{**SCORER_PRODUCER, **({} if idempotent or transactional_id else NON_IDEMPOTENT),
               **(producer_overrides or {})})
        self._consumer = consumer
        self._txn = (Transactions(self._producer, self._consumer)
                     if transactional_id is not None else None)
        # The loop's per-batch calls, bound once.
        self.consume_batch = self._consumer.consume_batch
        self.produce_many = self._producer.produce_many
        self.assignment = self._consumer.assignment
        self.lag = self._consumer.lag
        self.committed = self._consumer.committed
        self.commit = self._consumer.commit
        self.rewind_to_committed = self._consumer.rewind_to_committed
        self.hold = self._consumer.hold
        self.release = self._consumer.release

    def positions_seen(self) -> dict[tuple[str, int], int]:
        """The positions the loop last read (``lag``, every few seconds) of the partitions
        assigned now (a revoked one is another member's): the stall check's."""
        owned = set(self._consumer.assignment())
        return {tp: o for tp, o in self._consumer.positions_seen.items() if tp in owned}

    @property
    def rewinds(self) -> int:
        """Seeks back to the committed offsets: batches consumed before one are stale."""
        return self._consumer.rewinds

    @property
    def producer(self) -> Any:
        return self._producer.producer

    @property
    def consumer(self) -> Any:
        return self._consumer.consumer

    @property
    def max_message_bytes(self) -> int:
        """The producer's ``message.max.bytes``: a larger output is refused."""
        return self._producer.max_message_bytes

    def flush(self, timeout_s: float) -> None:
        """Wait for every outstanding message; raise if any failed or is still queued. The
        consumer stays in its group meanwhile (``hold``): ``release`` once delivered."""
        self._producer.flush(timeout_s, keep=self._consumer.hold)

    def renew_producer(self) -> None:
        """Replace the producer, dropping what it still holds (the caller publishes again)."""
        self._producer.renew()

    def outstanding(self) -> int:
        return self._producer.outstanding()

    # -- transactions (consume-transform-produce) ----------------------------------------
    def begin(self) -> None:
        assert self._txn is not None, "not a transactional StreamIO"
        self._txn.begin()

    def commit_transaction(self, offsets: dict[tuple[str, int], int], timeout_s: float, *,
                           consumed_at: int | None) -> None:
        """``consumed_at``: the batch's; a partition taken away since aborts it (D66)."""
        assert self._txn is not None, "not a transactional StreamIO"
        self._txn.commit(offsets, timeout_s, consumed_at=consumed_at)

    def abort_and_rewind(self, timeout_s: float) -> None:
        assert self._txn is not None, "not a transactional StreamIO"
        self._txn.abort_and_rewind(timeout_s)

    # -- shutdown ------------------------------------------------------------------------
    def close(self, *, timeout_s: float) -> None:
        try:
            self._producer.close(timeout_s)
        finally:
            self._consumer.close()


class ModelEventsListener:
    """``ModelPublished`` events from the end of ``events.models`` (no group, no join delay);
    a topic that does not exist yet is picked up when it appears."""

    def __init__(self, conn: KafkaConnection, topic: str = MODEL_EVENTS) -> None:
        self.conn = conn
        self.topic = topic
        self._follower: Follower | None = None
        self.bad = BadRecords(log, f"model event on {topic}")

    def poll(self, timeout_s: float) -> list[ModelPublished]:
        if self._follower is None:
            self._follower = Follower(self.conn, [self.topic], from_beginning=False)
        out: list[ModelPublished] = []
        for rec in self._follower.poll(timeout_s, max_messages=100):
            if not rec.value:
                continue
            try:
                out.append(parse(ModelPublished, rec.value))
            except Exception as exc:  # whatever the bytes: the scorer goes on
                self.bad.skip(f"{rec.topic}/{rec.partition}@{rec.offset}", exc)
        return out

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None
