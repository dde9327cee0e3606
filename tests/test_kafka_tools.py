"""The Apache Kafka launcher's own pieces that need no JVM."""

from __future__ import annotations

import pytest

from tests import real_kafka
from tools.kafka_cluster import _cluster_id


def test_cluster_ids_never_start_with_a_dash_the_storage_tool_would_read_as_an_option() -> None:
    ids = [_cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)


def test_the_broker_switch_takes_tansu_or_kafka_and_refuses_anything_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEADRACE_TEST_BROKER", raising=False)
    assert real_kafka.test_broker() == "tansu"
    monkeypatch.setenv("HEADRACE_TEST_BROKER", " Kafka ")
    assert real_kafka.test_broker() == "kafka"
    monkeypatch.setenv("HEADRACE_TEST_BROKER", "redpanda")
    with pytest.raises(pytest.UsageError, match="tansu or kafka"):
        real_kafka.test_broker()
