"""Tests here run on the suite's Apache Kafka cluster whatever HEADRACE_TEST_BROKER says: the
fault harness's fixtures (stream, scorers, settings) follow these ``broker`` and ``conn``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headrace.streams.clients import KafkaConnection
from tests import real_kafka
from tools.kafka_cluster import KafkaCluster


@pytest.fixture(scope="session")
def broker(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap


@pytest.fixture(scope="session")
def conn(broker: str) -> KafkaConnection:
    return real_kafka.connection(broker)


@pytest.fixture(autouse=True)
def replicated(monkeypatch: pytest.MonkeyPatch, kafka_cluster: KafkaCluster) -> Iterator[None]:
    """Every process a test starts creates its topics with 3 replicas, min.insync.replicas 2;
    a node a test stopped is back (and the cluster whole) for the next test."""
    for k, v in real_kafka.DURABILITY_ENV.items():
        monkeypatch.setenv(k, v)
    yield
    real_kafka.make_whole(kafka_cluster)
