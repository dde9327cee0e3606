"""Tests here run on the suite's Apache Kafka cluster whatever HEADRACE_TEST_BROKER says: the
fault harness's fixtures (stream, scorers, settings) follow these ``broker`` and ``conn``."""

from __future__ import annotations

import pytest

from headrace.streams.clients import KafkaConnection
from tests import real_kafka
from tests.on_kafka import replicated  # noqa: F401 - autouse: replicated topics, cluster whole
from tools.kafka_cluster import KafkaCluster


@pytest.fixture(scope="session")
def broker(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap


@pytest.fixture(scope="session")
def conn(broker: str) -> KafkaConnection:
    return real_kafka.connection(broker)
