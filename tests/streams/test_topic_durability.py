"""Every topic creator gets the cluster's durability from its connection, so a control topic
created first by a CLI command (canary, shadow, compare, train) is as durable as a scorer's."""

from __future__ import annotations

from pathlib import Path

from headrace.core.settings import Settings
from headrace.streams.clients import ensure_topics, list_topics, new_topic
from headrace.streams.connection import connection_for
from headrace.streams.topics import ControlTopics


def _settings(**kw: object) -> Settings:
    return Settings(bootstrap="k1:9092,k2:9092,k3:9092", dfs_root=Path("/tmp"), **kw)  # type: ignore[arg-type]


def test_a_configured_cluster_gives_every_created_topic_its_durability() -> None:
    conn = connection_for(_settings(replication_factor=3, min_insync_replicas=2))
    spec = next(s for s in ControlTopics().specs() if s.name == ControlTopics().rollout)
    t = new_topic(conn, spec)
    assert t.replication_factor == 3
    assert t.config == {**spec.config, "min.insync.replicas": "2"}
    assert t.config["cleanup.policy"] == "compact"  # the topic's own config is kept
    assert new_topic(conn, spec, replication_factor=1).replication_factor == 1


def test_an_embedded_broker_has_one_node_whatever_the_settings_say() -> None:
    conn = connection_for(_settings(replication_factor=3, min_insync_replicas=2), "127.0.0.1:1")
    t = new_topic(conn, ControlTopics().specs()[0])
    assert t.replication_factor == 1 and "min.insync.replicas" not in t.config


def test_the_real_broker_accepts_a_topic_with_the_connections_durability(
        broker: str, tmp_path: Path) -> None:
    import uuid

    from headrace.streams.topics import TopicSpec

    conn = connection_for(Settings(bootstrap=broker, dfs_root=tmp_path, replication_factor=1,
                                   min_insync_replicas=1))
    name = f"durable-{uuid.uuid4().hex[:8]}"
    assert ensure_topics(conn, [TopicSpec(name, partitions=2, purpose="test")]) == [name]
    assert name in list_topics(conn)  # (this broker has no DescribeConfigs to read it back)
