"""Producing to Kafka: the one delivery tracker, the one error classification, the one
wait-for-queue-space loop, and the producer that the scorer, replay, DLQ, send and the control
plane all use.

Delivery failures are classified once (:func:`delivery_failure`): a fatal producer error is
``FatalError`` (the process cannot go on with this producer); any other failed delivery is
``DeliveryFailed``, retriable: the caller produces those messages again (at-least-once). A
message refused for what it is (``MESSAGE_REFUSED``: too large, an invalid record) would be
refused again: ``DeliveryFailed.refused`` and ``produce_many``'s return value name those, so the
caller can dead-letter their cause instead of producing them again forever.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from headrace.contracts import Contract
from headrace.core.errors import FatalError, HeadraceError, RecordRef, RetriableError
from headrace.streams import headers as hdr
from headrace.streams.client_errors import (
    MESSAGE_REFUSED,
    Kind,
    classify,
    fatal_in,
    kind_of,
    reason,
)
from headrace.streams.clients import KafkaConnection
from headrace.streams.dlq import DeadLetter

log = logging.getLogger(__name__)

__all__ = ["MESSAGE_REFUSED"]  # re-exported; the classification is ``client_errors``'


@dataclass(frozen=True)
class Refused:
    """A message the client or the broker did not take."""

    topic: str
    value: bytes | None
    key: bytes | None
    reason: str  # the error's name and description
    permanent: bool = True  # the message's own fault (``MESSAGE_REFUSED``): it fails again


def refused(topic: str, value: bytes | None, key: bytes | None, err: KafkaError) -> Refused:
    return Refused(topic, value, key, f"{err.name()}: {err.str()}",
                   kind_of(err, producing=True) is Kind.PERMANENT)


class DeliveryFailed(RetriableError):
    """The broker refused some deliveries: those messages must be produced again, except the
    ``refused`` ones (the message's own fault: they would fail again)."""

    def __init__(self, message: str, refused: Sequence[Refused] = ()) -> None:
        super().__init__(message)
        self.refused = list(refused)


class ProducerRenewed(DeliveryFailed):
    """The producer failed fatally (fenced, out-of-order sequence) and was replaced: what it
    still held is lost, so everything since the last flush must be produced again."""


class FlushTimedOut(RetriableError):
    """Messages still unacknowledged after the flush timeout."""


def delivery_failure(errors: Sequence[KafkaError], refusals: Sequence[Refused] = ()
                     ) -> HeadraceError:
    """The one classification of failed deliveries (see the module doc)."""
    first = fatal_in(errors)
    if first is not None:
        return FatalError(f"delivery failed: {first.str()} ({first.name()})")
    first = errors[0]
    return DeliveryFailed(f"{len(errors)} deliveries failed: {first.str()}", refusals)


class Deliveries:
    """The delivery callback: counts acknowledgements, keeps the failures (thread-safe) and the
    highest acknowledged offset per partition (where a resume scan of the target may start).

    With ``delivery.report.only.error`` librdkafka calls back only for failures, so the happy
    path pays no per-message Python call; ``acked`` then stays 0.
    """

    def __init__(self) -> None:
        self.acked = 0
        # Deques, no lock: a callback must never wait. One waiting on a lock here hung a
        # scorer's flush for good after a fatal producer error (D44); append and popleft are
        # atomic, so a failure reported while ``take_all`` drains is taken now or next time.
        self._errors: deque[tuple[KafkaError, Refused | None]] = deque()
        self.max_offset: dict[int, int] = {}

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            gone = (refused(msg.topic() or "", msg.value(), msg.key(), err)
                    if err.code() in MESSAGE_REFUSED else None)
            self._errors.append((err, gone))
            return
        self.acked += 1
        p, o = msg.partition(), msg.offset()
        if o is not None and o >= 0 and o > self.max_offset.get(p, -1):  # type: ignore[arg-type]
            self.max_offset[p] = o  # type: ignore[index]

    def take(self) -> list[KafkaError]:
        """The failures so far (forgotten once taken)."""
        return self.take_all()[0]

    def take_all(self) -> tuple[list[KafkaError], list[Refused]]:
        """The failures so far and the refused messages among them (forgotten once taken)."""
        out: list[KafkaError] = []
        ref: list[Refused] = []
        pop = self._errors.popleft
        while True:
            try:
                err, gone = pop()
            except IndexError:
                return out, ref
            out.append(err)
            if gone is not None:
                ref.append(gone)

    def raise_if_failed(self) -> None:
        errors, refusals = self.take_all()
        if errors:
            raise delivery_failure(errors, refusals)


def produce(producer: Producer, topic: str, value: bytes | None, key: bytes | str | None = None,
            headers: hdr.Headers | None = None, *, partition: int = -1,
            timestamp_ms: int = 0, on_delivery: Any = None) -> None:
    """Produce one message, waiting for queue space instead of failing when it is full."""
    call: Any = producer.produce
    while True:
        try:
            # Positional (partition, on_delivery, callback, timestamp, headers): keywords cost
            # ~0.4 us a message. Partition -1 lets the partitioner choose; timestamp 0 is now.
            call(topic, value, key, partition, on_delivery, None, timestamp_ms, headers or [])
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:  # fatal -> FatalError, else retriable (client_errors)
            raise classify(exc, f"produce to {topic}") from None


def publish(producer: Producer, topic: str, event: Contract, *, key: str | None = None,
            on_delivery: Any = None) -> None:
    """Produce a contract event with its content-type and schema headers."""
    produce(producer, topic, event.to_bytes(), key,
            hdr.contract_headers(event.SCHEMA, event.schema_version), on_delivery=on_delivery)


def write_dead_letter(producer: Producer, dlq_topic: str, letter: DeadLetter, *,
                      on_delivery: Any = None) -> None:
    produce(producer, dlq_topic, letter.payload(), letter.record.key, letter.headers(),
            on_delivery=on_delivery)


# How often a flush that waits calls its ``keep`` (a consumer staying in its group).
KEEP_EVERY_S = 1.0


def flush(producer: Producer, deliveries: Deliveries, *, timeout_s: float,
          keep: Callable[[], None] | None = None) -> None:
    """Wait for every outstanding message; raise if any failed or is still queued.
    ``keep`` is called every ``KEEP_EVERY_S`` while messages wait."""
    deadline = time.monotonic() + timeout_s
    try:
        remaining = producer.flush(timeout_s if keep is None else min(timeout_s, KEEP_EVERY_S))
        while remaining and keep is not None and (left := deadline - time.monotonic()) > 0:
            keep()
            remaining = producer.flush(min(left, KEEP_EVERY_S))
    except KafkaException as exc:  # a fatal error is raised here too (no error_cb is set)
        raise classify(exc, "flush") from None
    except SystemError as exc:
        # Seen when the instance failed fatally during the flush (out-of-order sequence after a
        # broker restart under two scorers): the client returns no exception of its own. The
        # instance cannot go on; the caller renews it (or exits, if transactional).
        raise FatalError(f"producer failed inside the client during flush ({exc})") from None
    deliveries.raise_if_failed()
    if remaining:
        raise FlushTimedOut(f"{remaining} messages not acknowledged within {timeout_s:.1f}s")


class BatchProducer:
    """A producer with its delivery tracker: bulk produce, flush, renew, transactions."""

    def __init__(self, conn: KafkaConnection, *, transactional_id: str | None = None,
                 **overrides: Any) -> None:
        self.conn = conn
        self.transactional = transactional_id is not None
        self.deliveries = Deliveries()
        conf = conn.producer_config(on_delivery=self.deliveries, **overrides)
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf.setdefault("transaction.timeout.ms", 60_000)  # an operator's value wins
        self._conf = conf
        self.producer = Producer(conf)
        # Set when a fatal error replaced the producer between flushes: the next flush raises
        # ``ProducerRenewed`` so the caller produces everything since the last one again.
        self._lost: str | None = None
        # The topics produced to since the last complete flush: named when one times out.
        self._topics: set[str] = set()

    def produce_many(self, topic: str, values: Sequence[bytes], keys: Sequence[bytes | None],
                     headers: list[tuple[str, bytes]]) -> list[Refused]:
        """One message per value (partitioned by key), waiting when the queue is full. The
        messages the client refused at once (too large, unknown partition...). A fatal error
        renews a non-transactional producer (the next ``flush`` raises ``ProducerRenewed``);
        a transactional one's is ``FatalError``."""
        call: Any = self.producer.produce
        failed: list[Refused] = []
        self._topics.add(topic)
        for v, k in zip(values, keys, strict=True):
            while True:
                try:
                    # Positional, as in :func:`produce`: this is the scorer's hot path.
                    call(topic, v, k, -1, None, None, 0, headers)
                    break
                except BufferError:
                    self._poll(0.05)
                    call = self.producer.produce  # renewed, if the poll met a fatal error
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else KafkaError(KafkaError._FAIL)
                    if kind_of(err, producing=True) is Kind.FATAL:
                        self._renew_after(err)  # FatalError when transactional
                        call = self.producer.produce
                        continue
                    failed.append(refused(topic, v, k, err))
                    break
        self._poll(0)
        return failed

    def _poll(self, timeout_s: float) -> None:
        """Serve delivery reports. With no error callback set, the client raises an instance's
        fatal error (an out-of-order sequence after a broker restart) from ``poll``: that
        renews a non-transactional producer as a fatal ``produce`` does."""
        try:
            self.producer.poll(timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else KafkaError(KafkaError._FAIL)
            if kind_of(err, producing=True) is not Kind.FATAL:
                raise classify(exc, "producer poll") from None
            self._renew_after(err)  # FatalError when transactional

    def produce(self, topic: str, value: bytes | None, key: bytes | str | None = None,
                headers: hdr.Headers | None = None, *, partition: int = -1,
                timestamp_ms: int = 0) -> None:
        """One message; a fatal error renews a non-transactional producer, which takes the
        message (the next ``flush`` raises ``ProducerRenewed``: what the old one held is lost)."""
        self._topics.add(topic)
        try:
            produce(self.producer, topic, value, key, headers, partition=partition,
                    timestamp_ms=timestamp_ms)
        except FatalError as exc:
            if self.transactional:
                raise
            log.warning("%s; starting a new producer", exc)
            self._lost = str(exc)
            self.renew()
            produce(self.producer, topic, value, key, headers, partition=partition,
                    timestamp_ms=timestamp_ms)

    def poll(self) -> None:
        self._poll(0)

    def flush(self, timeout_s: float, *, keep: Callable[[], None] | None = None) -> None:
        """Wait for every outstanding message; raise if any failed or is still queued
        (``keep``: called every ``KEEP_EVERY_S`` meanwhile).

        A fatal error on a non-transactional producer (e.g. UNKNOWN_PRODUCER_ID from a broker
        that lost its producer state) renews the producer, which is safe for an idempotent one,
        and raises ``DeliveryFailed`` so the caller produces the batch again.
        """
        try:
            flush(self.producer, self.deliveries, timeout_s=timeout_s, keep=keep)
        except FatalError as exc:
            if self.transactional:
                raise
            self.renew()
            raise ProducerRenewed(f"producer failed fatally ({exc}); renewed it") from None
        except FlushTimedOut as exc:
            raise FlushTimedOut(f"{exc} {self._held()}") from None
        self._topics.clear()
        if self._lost is not None:
            lost, self._lost = self._lost, None
            raise ProducerRenewed(f"producer failed fatally ({lost}); renewed it")

    def _held(self) -> str:
        """Where the held messages go, and which of those topics the cluster does not have
        (a producer never creates one: it holds the messages until the topic exists)."""
        held = f"produced to {', '.join(sorted(self._topics))}"
        try:
            known = self.producer.list_topics(timeout=2.0).topics
        except KafkaException:
            return f"({held})"
        missing = sorted(t for t in self._topics if t not in known)
        if missing:
            held += (f"; not on the cluster: {', '.join(missing)}, "
                     "which `headrace topics --create` makes")
        return f"({held})"

    def _renew_after(self, err: KafkaError) -> None:
        """A fatal error from ``produce``: a new producer (librdkafka's rule for idempotent
        ones), or ``FatalError`` for a transactional one (its fencing is the point)."""
        if self.transactional:
            raise FatalError(f"produce failed: {err.str()} ({err.name()})")
        log.warning("producer failed fatally (%s: %s); starting a new one", err.name(),
                    err.str())
        self._lost = f"{err.name()}: {err.str()}"
        self.renew()

    def renew(self) -> None:
        """Replace the producer, dropping what it still holds (the caller publishes again)."""
        if self.transactional:
            return
        self._replace()

    def _replace(self) -> None:
        old, self.producer = self.producer, Producer(self._conf)
        try:
            old.purge()
            old.poll(0)  # run the purged messages' callbacks now, into the failures we drop
        except (KafkaException, SystemError) as exc:  # a failed instance may refuse even that
            log.warning("the replaced producer could not be purged: %s", exc)
        self.deliveries.take()

    def recreate(self) -> None:
        """A transactional producer whose last transaction has an unknown outcome (its commit
        or abort timed out): a new, uninitialised instance with the same transactional.id. Its
        ``init_transactions`` fences the old one and settles the old transaction (the
        coordinator completes a commit it prepared, aborts one still open); nothing the old
        one held is sent again."""
        self._replace()
        self._topics.clear()

    def outstanding(self) -> int:
        return len(self.producer)

    @property
    def max_message_bytes(self) -> int:
        """``message.max.bytes``: the client refuses a larger message."""
        return int(self._conf.get("message.max.bytes", 1_000_000))

    def close(self, timeout_s: float) -> None:
        try:
            self.producer.flush(max(0.0, timeout_s))
        except KafkaException as exc:
            # A fenced (or fatally failed) producer refuses to flush: nothing more can be
            # delivered, and whatever it held was never committed. Raising here would hide the
            # error the process is exiting for behind a traceback.
            log.warning("producer closed with undelivered messages: %s", reason(exc))


def send_events(conn: KafkaConnection, topic: str, events: Iterable[Contract], *,
                key_of: Any = None) -> int:
    """Publish contract events and wait until every one is acknowledged."""
    producer = BatchProducer(conn)
    n = 0
    for ev in events:
        publish(producer.producer, topic, ev, key=key_of(ev) if key_of else None)
        n += 1
    producer.flush(conn.timeout_s)
    return n


class EventSink:
    """A producer for low-volume contract events; ``send`` waits for the acknowledgement."""

    def __init__(self, conn: KafkaConnection) -> None:
        # linger 0: control events are few and latency matters (job start, promotion).
        low_latency: dict[str, Any] = {"linger.ms": 0}
        self._producer = BatchProducer(conn, **low_latency)

    def send(self, topic: str, event: Contract, *, key: str | None = None,
             wait: bool = True) -> None:
        """A fatal producer error (fenced, out-of-order sequence) renews the producer and
        sends again, once; a second one is ``FatalError`` (the process exits)."""
        for attempt in (1, 2):
            try:
                try:
                    publish(self._producer.producer, topic, event, key=key)
                except FatalError as exc:
                    self._producer.renew()
                    raise ProducerRenewed(str(exc)) from None
                if wait:
                    self.flush()
                else:
                    self._producer.poll()
                return
            except ProducerRenewed as exc:
                if attempt == 2:
                    raise FatalError(f"event producer failed fatally twice: {exc}") from None
                log.warning("%s; sending %s again", exc, type(event).__name__)

    def dead_letter(self, topic: str, record: RecordRef, exc: BaseException, *,
                    stage: str) -> None:
        write_dead_letter(self._producer.producer, topic,
                          DeadLetter.from_error(record, exc, stage=stage))
        self.flush()

    def flush(self) -> None:
        self._producer.flush(self._producer.conn.timeout_s)

    def close(self) -> None:
        self._producer.close(self._producer.conn.timeout_s)
