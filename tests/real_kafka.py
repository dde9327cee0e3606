"""Which broker the suite runs on (``HEADRACE_TEST_BROKER=tansu|kafka``) and the one Apache
Kafka cluster a run starts when it needs it (3 nodes, replication 3, min.insync.replicas 2).

Tests never attach to a broker they did not start: the cluster is ours, on free loopback ports.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

import pytest

from headrace.streams.clients import KafkaConnection
from tools.kafka_cluster import KafkaCluster, KafkaUnavailable, java_and_maven_missing

BROKERS = 3
REPLICATION = 3
MIN_INSYNC = 2
# Settings every process a test starts reads, so its topics are as durable as the fixtures'.
DURABILITY_ENV = {"HEADRACE_REPLICATION_FACTOR": str(REPLICATION),
                  "HEADRACE_MIN_INSYNC_REPLICAS": str(MIN_INSYNC)}

_cluster: KafkaCluster | None = None


def test_broker() -> str:
    """The broker the switch picks: ``tansu`` (the default, embedded) or ``kafka``."""
    choice = os.environ.get("HEADRACE_TEST_BROKER", "tansu").strip().lower() or "tansu"
    if choice not in ("tansu", "kafka"):
        raise pytest.UsageError(f"HEADRACE_TEST_BROKER={choice!r}: use tansu or kafka")
    return choice


def cluster() -> KafkaCluster:
    """The run's cluster, started on first use; skips (saying why) without Java or Maven."""
    global _cluster
    if _cluster is None:
        why = java_and_maven_missing()
        if why:
            pytest.skip(f"Apache Kafka tests need Java 17+ and Maven: {why}")
        try:
            _cluster = KafkaCluster(brokers=BROKERS).start()
        except KafkaUnavailable as exc:
            pytest.fail(f"cannot start Apache Kafka: {exc}")
    return _cluster


def make_whole(cluster: KafkaCluster) -> None:
    """Restart the nodes a test left stopped (one that failed midway) and wait for them."""
    down = [n for n in cluster.nodes if not n.alive()]
    for n in down:
        n.start()
    if down:
        cluster.wait_ready(nodes=[n.node_id for n in down], timeout_s=60)


def stop_every_node(cluster: KafkaCluster) -> None:
    """Stop every node at once (one by one, the last would wait for a quorum); their data
    stays for ``make_whole`` or a test's own restart."""
    threads = [threading.Thread(target=n.stop) for n in cluster.nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def started() -> KafkaCluster | None:
    return _cluster


def stop() -> None:
    global _cluster
    if _cluster is not None:
        _cluster.stop()
        _cluster = None


def connection(bootstrap: str) -> KafkaConnection:
    """A test's connection; on the Apache Kafka cluster its topics are replicated like
    production's (3 replicas, min.insync.replicas 2)."""
    if _cluster is not None and bootstrap == _cluster.bootstrap:
        return KafkaConnection(bootstrap=bootstrap, timeout_s=15.0, replication_factor=REPLICATION,
                               topic_config={"min.insync.replicas": str(MIN_INSYNC)})
    return KafkaConnection(bootstrap=bootstrap, timeout_s=15.0)


def is_cluster(bootstrap: str) -> bool:
    """Whether ``bootstrap`` is the run's Apache Kafka cluster (not the embedded Tansu)."""
    return _cluster is not None and bootstrap == _cluster.bootstrap


def allow_records_up_to(bootstrap: str, topic: str, max_bytes: int) -> None:
    """Raise ``topic``'s max.message.bytes on Apache Kafka (default 1 MiB) for a test that
    needs larger records on the broker; Tansu enforces no such limit."""
    if not is_cluster(bootstrap):
        return
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(max_bytes),
                    incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def keep_logs(nodeid: str) -> Path | None:
    """Copy the cluster's logs for a failed test; where they are."""
    if _cluster is None:
        return None
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-120:]
    dest = Path(tempfile.gettempdir()) / f"headrace-kafka-logs-{os.getpid()}" / name
    return _cluster.keep_logs(dest)
