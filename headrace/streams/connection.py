"""Resolve where Kafka is: the configured cluster, or an embedded broker started for us."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from headrace.core.settings import Settings
from headrace.streams.broker import MEMORY_ONLY_NOTICE, EmbeddedBroker
from headrace.streams.clients import KafkaConnection


def connection_for(settings: Settings, bootstrap: str | None = None) -> KafkaConnection:
    """The configured cluster, or (``bootstrap`` given) an embedded broker started for us: one
    node, so its topics get one replica and no durability config."""
    embedded = bootstrap is not None
    return KafkaConnection(
        bootstrap=bootstrap or settings.bootstrap or "",
        extra=dict(settings.kafka_config),
        client_rack=settings.client_rack,
        timeout_s=settings.request_timeout_s,
        replication_factor=1 if embedded else settings.replication_factor,
        topic_config={} if embedded else settings.topic_config(),
    )


@contextmanager
def kafka(settings: Settings, *, announce: bool = True) -> Iterator[KafkaConnection]:
    """The configured cluster; without one, an embedded broker for the duration of the block."""
    if settings.bootstrap:
        yield connection_for(settings)
        return
    broker = EmbeddedBroker(port=settings.embedded_port).start()
    if announce:
        print(f"{MEMORY_ONLY_NOTICE} ({broker.bootstrap})", file=sys.stderr)
    try:
        yield connection_for(settings, broker.bootstrap)
    finally:
        broker.stop()
