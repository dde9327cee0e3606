"""Run a suite's key end-to-end tests once more on the run's Apache Kafka cluster.

A ``test_on_kafka.py`` beside a suite imports these fixtures and the tests it re-runs: pytest
collects an imported test in the importing module, where ``broker`` and ``conn`` below (the
3-node cluster, topics replicated 3 with ``min.insync.replicas`` 2) override the embedded
Tansu's. The cluster is the run's one (one per xdist worker, started on first use). Under
``HEADRACE_TEST_BROKER=kafka`` the originals already run on Kafka, so these are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headrace.streams.clients import KafkaConnection
from tests import real_kafka
from tools.kafka_cluster import KafkaCluster

pytestmark = [
    pytest.mark.slow, pytest.mark.kafka,
    pytest.mark.skipif(real_kafka.test_broker() == "kafka",
                       reason="HEADRACE_TEST_BROKER=kafka runs the originals on Apache Kafka"),
]


@pytest.fixture(scope="module")
def broker(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap


@pytest.fixture(scope="module")
def conn(broker: str) -> KafkaConnection:
    return real_kafka.connection(broker)


@pytest.fixture(autouse=True)
def replicated(monkeypatch: pytest.MonkeyPatch, kafka_cluster: KafkaCluster) -> Iterator[None]:
    """Processes a test starts create their topics like the fixtures' (3 replicas, min ISR 2);
    a node a test left stopped is back for the next."""
    for k, v in real_kafka.DURABILITY_ENV.items():
        monkeypatch.setenv(k, v)
    yield
    real_kafka.make_whole(kafka_cluster)
