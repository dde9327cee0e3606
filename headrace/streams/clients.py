"""Kafka client configuration and admin: where the cluster is, the producer and consumer
defaults, client factories, topics and their partitions.

Producing is in ``producing``, consuming in ``consuming`` (the scorer's batches) and ``reading``
(group-less reads); the three share this configuration.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headrace.core.errors import (
    BrokerUnavailable,
    ConfigError,
    FatalError,
)
from headrace.streams.client_errors import classify, reason
from headrace.streams.client_log import CLIENT_LOG
from headrace.streams.topics import TopicSpec

__all__ = ["classify", "reason"]  # re-exported: the classification lives in client_errors

# Between a client's tries to reach a broker that refuses it: from 0.5 s (librdkafka's 0.1 s
# made a lost cluster a stream of connects) doubling to 10 s. An operator's values win.
RECONNECT: dict[str, Any] = {"reconnect.backoff.ms": 500, "reconnect.backoff.max.ms": 10_000}


@dataclass(frozen=True)
class KafkaConnection:
    """Where the cluster is and how to talk to it (security settings included)."""

    bootstrap: str
    extra: dict[str, str] = field(default_factory=dict)
    client_rack: str | None = None
    timeout_s: float = 10.0
    # Durability of the topics created through this connection: every creator gets the
    # cluster's, so a topic created first by a CLI command is as durable as a scorer's.
    replication_factor: int = 1
    topic_config: dict[str, str] = field(default_factory=dict)  # e.g. min.insync.replicas

    def __post_init__(self) -> None:
        owned = sorted(k for k in self.extra if k.strip().lower() in RESERVED)
        if owned:
            key = owned[0]
            raise ConfigError(f"HEADRACE_KAFKA_CONFIG: {key} is set by Headrace "
                              f"({RESERVED[key.strip().lower()]}); remove it")

    def base(self) -> dict[str, Any]:
        # librdkafka's own log lines go to Python logging, rate-limited (``client_log``).
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOG,
                                **RECONNECT}
        if self.client_rack:
            conf["client.rack"] = self.client_rack
        conf.update(self.extra)
        return conf

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        """Headrace's producer defaults, then the caller's tunings, then the operator's
        settings (``extra``), which hold no ``RESERVED`` key: a ``linger.ms`` or
        ``compression.type`` the operator gives is the one used."""
        return {**PRODUCER_DEFAULTS, **overrides, **self.base()}

    def consumer_config(self, group_id: str, **overrides: Any) -> dict[str, Any]:
        """Likewise for a consumer of ``group_id``."""
        return {**CONSUMER_DEFAULTS, **overrides, **self.base(), "group.id": group_id}


PRODUCER_DEFAULTS: dict[str, Any] = {
    # Safety: no duplicates from retries, every in-sync replica acknowledges.
    "enable.idempotence": True,
    "acks": "all",
    # Throughput: fill large batches, wait a little for them.
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    # Under Kafka's default max.message.bytes (1,048,588), which a broker checks per batch:
    # a larger batch of small records is refused whole (MSG_SIZE_TOO_LARGE; Tansu never checks).
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.max.bytes": 8 * 1024 * 1024,
}

# What the guarantees rest on (no duplicate from a retry, nothing committed before it is
# published, no aborted record read) and what each client names itself: not the operator's
# to change through ``extra``. The reason is in the error.
RESERVED: dict[str, str] = {
    "bootstrap.servers": "HEADRACE_BOOTSTRAP or --bootstrap names the cluster",
    "enable.idempotence": "producers are idempotent so a retry never duplicates a record",
    "acks": "every in-sync replica acknowledges a prediction before its input is committed",
    "transactional.id": "each transactional scorer names its own",
    "group.id": "each role names its own consumer group",
    "enable.auto.commit": "offsets are committed only after the outputs are acknowledged",
    "enable.auto.offset.store": "offsets are committed only after the outputs are acknowledged",
    "isolation.level": "records of aborted transactions are never read",
    "allow.auto.create.topics": "consumers and scorers never auto-create: Headrace creates its "
                                "topics with their partitions and config, which a broker's "
                                "auto-creation knows neither",
    "max.in.flight.requests.per.connection": "a producer keeps each partition's order across "
                                              "retries",
    **{cb: "a Python callback Headrace sets" for cb in (
        "logger", "on_delivery", "error_cb", "stats_cb", "throttle_cb", "oauth_cb")},
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "allow.auto.create.topics": False,  # librdkafka's default for consumers; said, not assumed
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
    return Producer(conn.producer_config(**overrides))


def make_consumer(conn: KafkaConnection, group_id: str, **overrides: Any) -> Consumer:
    return Consumer(conn.consumer_config(group_id, **overrides))


def make_admin(conn: KafkaConnection) -> AdminClient:
    return AdminClient(conn.base())


def check_reachable(conn: KafkaConnection, *, timeout_s: float | None = None) -> None:
    """Raise ``BrokerUnavailable`` with one line if no broker answers metadata in time."""
    timeout = conn.timeout_s if timeout_s is None else timeout_s
    try:
        md = make_admin(conn).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailable(
            f"Kafka at {conn.bootstrap} did not answer within {timeout:.0f}s ({reason(exc)})"
        ) from None
    if not md.brokers:
        raise BrokerUnavailable(f"Kafka at {conn.bootstrap} reports no brokers")


def list_topics(conn: KafkaConnection) -> dict[str, int]:
    """Topic name -> partition count."""
    check_reachable(conn)
    md = make_admin(conn).list_topics(timeout=conn.timeout_s)
    return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}


def new_topic(conn: KafkaConnection, spec: TopicSpec, *,
              replication_factor: int | None = None) -> NewTopic:
    """The topic as created on ``conn``'s cluster: its own config plus the cluster's durability."""
    return NewTopic(spec.name, num_partitions=spec.partitions,
                    replication_factor=replication_factor or conn.replication_factor,
                    config={**spec.config, **conn.topic_config})


def ensure_topics(
    conn: KafkaConnection, specs: Iterable[TopicSpec], *, replication_factor: int | None = None
) -> list[str]:
    """Create the missing topics; return the names created. Idempotent. The replication
    factor and durability config are the connection's unless ``replication_factor`` is given."""
    existing = set(list_topics(conn))
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    admin = make_admin(conn)
    new = [new_topic(conn, s, replication_factor=replication_factor) for s in missing]
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
            raise FatalError(f"cannot create topic {name}: {reason(exc)}") from None
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


def _partitions(conn: KafkaConnection, topic: str) -> list[int] | None:
    # Ask for all topics: a metadata request naming one auto-creates it on some brokers (Tansu).
    try:
        md = make_admin(conn).list_topics(timeout=conn.timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(f"Kafka at {conn.bootstrap} did not answer: {reason(exc)}"
                                ) from None
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return sorted(t.partitions)


def partitions_of(conn: KafkaConnection, topic: str) -> list[int]:
    """The topic's partition numbers; ``FatalError`` if it does not exist."""
    parts = _partitions(conn, topic)
    if parts is None:
        raise FatalError(f"topic {topic} does not exist")
    return parts


def partition_count(conn: KafkaConnection, topic: str) -> int | None:
    """Number of partitions, or None if the topic does not exist."""
    parts = _partitions(conn, topic)
    return None if parts is None else len(parts)



def delete_topics(conn: KafkaConnection, names: Sequence[str]) -> list[str]:
    """Delete the topics that exist; return the names deleted (waits until they are gone)."""
    existing = set(list_topics(conn))
    doomed = [n for n in names if n in existing]
    if not doomed:
        return []
    admin = make_admin(conn)  # kept alive until every future is done
    futures = admin.delete_topics(doomed, request_timeout=conn.timeout_s)
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            raise classify(exc, f"deleting topic {name}") from None
    deadline = time.monotonic() + conn.timeout_s
    while set(doomed) & set(list_topics(conn)):
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"topics still listed after deletion: {', '.join(doomed)}")
        time.sleep(0.05)
    return doomed
