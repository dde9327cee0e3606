"""Producer, consumer and admin clients over confluent-kafka, with safe, fast defaults."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.core.errors import BrokerUnavailable, FatalError, RetriableError
from headrace.streams import headers as hdr
from headrace.streams.contracts import Contract
from headrace.streams.topics import TopicSpec

_KAFKA_LOG = logging.getLogger("headrace.kafka")
_KAFKA_LOG.addHandler(logging.NullHandler())  # connection retries are not worth a line each


@dataclass(frozen=True)
class KafkaConnection:
    """Where the cluster is and how to talk to it (security settings included)."""

    bootstrap: str
    extra: dict[str, str] = field(default_factory=dict)
    client_rack: str | None = None
    timeout_s: float = 10.0

    def base(self) -> dict[str, Any]:
        # librdkafka's own log lines go to Python logging, not straight to stderr.
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": _KAFKA_LOG}
        if self.client_rack:
            conf["client.rack"] = self.client_rack
        conf.update(self.extra)
        return conf


PRODUCER_DEFAULTS: dict[str, Any] = {
    # Safety: no duplicates from retries, every in-sync replica acknowledges.
    "enable.idempotence": True,
    "acks": "all",
    # Throughput: fill large batches, wait a little for them.
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "batch.size": 4 * 1024 * 1024,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.max.bytes": 8 * 1024 * 1024,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    # A new member is assigned about max.poll.interval.ms/10 after joining on Tansu.
    "session.timeout.ms": 6000,
    "max.poll.interval.ms": 10000,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.wait.max.ms": 10,
    "queued.min.messages": 200_000,
    # Once the local queue is full, librdkafka waits this long before the next fetch (default
    # 1000 ms): the scorer drains a full queue in well under that and then starves.
    "fetch.queue.backoff.ms": 10,
}


def make_producer(conn: KafkaConnection, **overrides: Any) -> Producer:
    conf = {**conn.base(), **PRODUCER_DEFAULTS, **overrides}
    return Producer(conf)


def make_consumer(conn: KafkaConnection, group_id: str, **overrides: Any) -> Consumer:
    conf = {**conn.base(), **CONSUMER_DEFAULTS, "group.id": group_id, **overrides}
    return Consumer(conf)


def make_admin(conn: KafkaConnection) -> AdminClient:
    return AdminClient(conn.base())


def check_reachable(conn: KafkaConnection, *, timeout_s: float | None = None) -> None:
    """Raise ``BrokerUnavailable`` with one line if no broker answers metadata in time."""
    timeout = conn.timeout_s if timeout_s is None else timeout_s
    try:
        md = make_admin(conn).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailable(
            f"Kafka at {conn.bootstrap} did not answer within {timeout:.0f}s ({_reason(exc)})"
        ) from None
    if not md.brokers:
        raise BrokerUnavailable(f"Kafka at {conn.bootstrap} reports no brokers")


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)


def list_topics(conn: KafkaConnection) -> dict[str, int]:
    """Topic name -> partition count."""
    check_reachable(conn)
    md = make_admin(conn).list_topics(timeout=conn.timeout_s)
    return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}


def ensure_topics(
    conn: KafkaConnection, specs: Iterable[TopicSpec], *, replication_factor: int = 1
) -> list[str]:
    """Create the missing topics; return the names created. Idempotent."""
    existing = set(list_topics(conn))
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    admin = make_admin(conn)
    new = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=replication_factor,
                 config=dict(s.config))
        for s in missing
    ]
    futures = admin.create_topics(new, request_timeout=conn.timeout_s)
    created = []
    for name, fut in futures.items():
        try:
            fut.result()
            created.append(name)
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise FatalError(f"cannot create topic {name}: {_reason(exc)}") from None
    _wait_for_topics(conn, [s.name for s in missing])
    return sorted(created)


def _wait_for_topics(conn: KafkaConnection, names: Sequence[str]) -> None:
    admin = make_admin(conn)
    deadline = time.monotonic() + conn.timeout_s
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=conn.timeout_s).topics
        if all(n in topics and topics[n].partitions for n in names):
            return
        time.sleep(0.05)
    raise BrokerUnavailable(f"topics not visible after creation: {', '.join(names)}")


class DeliveryTracker:
    """Counts acknowledgements and remembers the first delivery error."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed += 1
            if self.error is None:
                self.error = err

    def raise_if_failed(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            if err.retriable():
                raise RetriableError(f"delivery failed: {err.str()}")
            raise FatalError(f"delivery failed: {err.str()}")


def produce(
    producer: Producer,
    topic: str,
    value: bytes | None,
    *,
    key: bytes | str | None = None,
    headers: hdr.Headers | None = None,
    partition: int | None = None,
    timestamp_ms: int | None = None,
    on_delivery: Any = None,
) -> None:
    """Produce one message, waiting for queue space instead of failing when it is full."""
    kwargs: dict[str, Any] = {"value": value, "key": key, "headers": headers or []}
    if partition is not None:
        kwargs["partition"] = partition
    if timestamp_ms is not None:
        kwargs["timestamp"] = timestamp_ms
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def publish(
    producer: Producer, topic: str, event: Contract, *, key: str | None = None,
    on_delivery: Any = None,
) -> None:
    """Produce a contract event with its content-type and schema headers."""
    produce(
        producer, topic, event.to_bytes(), key=key,
        headers=hdr.contract_headers(event.SCHEMA, event.schema_version),
        on_delivery=on_delivery,
    )


def flush_or_raise(producer: Producer, tracker: DeliveryTracker, *, timeout_s: float) -> None:
    remaining = producer.flush(timeout_s)
    tracker.raise_if_failed()
    if remaining:
        raise RetriableError(f"{remaining} messages not acknowledged within {timeout_s:.0f}s")


def send_events(
    conn: KafkaConnection, topic: str, events: Iterable[Contract], *, key_of: Any = None
) -> int:
    """Publish contract events and wait until every one is acknowledged."""
    producer = make_producer(conn)
    tracker = DeliveryTracker()
    n = 0
    for ev in events:
        publish(producer, topic, ev, key=key_of(ev) if key_of else None, on_delivery=tracker)
        n += 1
    flush_or_raise(producer, tracker, timeout_s=conn.timeout_s)
    return n


def end_offsets(
    consumer: Consumer, topic: str, partitions: Iterable[int], *, timeout_s: float = 10.0
) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) watermarks. On Tansu the high mark can be low after a batch."""
    out: dict[int, tuple[int, int]] = {}
    for p in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
        out[p] = (int(low), int(high))
    return out


def partitions_of(conn: KafkaConnection, topic: str) -> list[int]:
    # Ask for all topics: a metadata request naming one auto-creates it on some brokers (Tansu).
    md = make_admin(conn).list_topics(timeout=conn.timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise FatalError(f"topic {topic} does not exist")
    return sorted(t.partitions)
