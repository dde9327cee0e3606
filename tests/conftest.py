"""Shared fixtures: one embedded broker per test session, uuid topic names, a temp DFS."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headrace.core.llvm_guard import load_in_safe_order
from headrace.core.settings import Settings, load_settings
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers.datasets import make_demo
from tests import real_kafka, real_kube, real_registry
from tools.kafka_cluster import KafkaCluster


def pytest_configure(config: pytest.Config) -> None:
    real_kafka.test_broker()  # a bad HEADRACE_TEST_BROKER stops the run before any test
    # Before any test module imports TensorFlow itself: Triton first, as the product's ML
    # packages do, so any subset of the suite imports the frameworks in either order.
    load_in_safe_order()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # `-m kafka` selects every test that needs the real cluster
        if "kafka_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
        if "kube" in getattr(item, "fixturenames", ()):  # `-m kube`: the real control plane
            item.add_marker(pytest.mark.kube)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and real_kafka.started() is not None:
        kept = real_kafka.keep_logs(item.nodeid)
        report.sections.append(("Apache Kafka", f"the cluster's logs are kept in {kept}"))
    if report.failed and real_kube.started() is not None:
        kept = real_kube.keep_logs(item.nodeid)
        report.sections.append(("Kubernetes", f"the control plane's logs are kept in {kept}"))


def pytest_sessionfinish() -> None:
    real_kafka.stop()
    real_kube.stop()
    real_registry.stop()


@pytest.fixture(scope="session")
def kafka_cluster() -> KafkaCluster:
    """The run's Apache Kafka cluster (3 nodes, replication 3, min.insync.replicas 2), whatever
    HEADRACE_TEST_BROKER says; skipped, saying why, without Java or Maven."""
    return real_kafka.cluster()


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[str]:
    """Bootstrap servers of the broker HEADRACE_TEST_BROKER picks: one embedded Tansu
    (default) or the run's Apache Kafka cluster, whose topics then get 3 replicas."""
    if real_kafka.test_broker() == "kafka":
        cluster = request.getfixturevalue("kafka_cluster")
        with pytest.MonkeyPatch.context() as mp:
            for k, v in real_kafka.DURABILITY_ENV.items():
                mp.setenv(k, v)
            yield cluster.bootstrap
        return
    b = EmbeddedBroker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log").start()
    try:
        yield b.bootstrap
    finally:
        b.stop()


@pytest.fixture(scope="session")
def conn(broker: str) -> KafkaConnection:
    return real_kafka.connection(broker)


@pytest.fixture
def dfs(tmp_path: Path) -> Path:
    root = tmp_path / "dfs"
    root.mkdir()
    return root


@pytest.fixture
def settings(broker: str, dfs: Path) -> Settings:
    return load_settings(bootstrap=broker, dfs_root=dfs, streams=[f"s{uuid.uuid4().hex[:10]}"],
                         partitions=3)


@pytest.fixture
def topic_factory(conn: KafkaConnection) -> Callable[..., str]:
    """Create a fresh uuid-named topic: ``topic_factory(partitions=3, prefix="t")``."""

    def make(*, partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        ensure_topics(conn, [TopicSpec(name, partitions, "test")])
        return name

    return make


@pytest.fixture
def demo(dfs: Path) -> str:
    """A small labelled Parquet dataset on the DFS; its URI."""
    make_demo(out=dfs / "datasets" / "demo.parquet", rows=300, seed=1)
    return "datasets/demo.parquet"


@pytest.fixture
def topics(conn: KafkaConnection) -> ControlTopics:
    """Control-plane topics with a uuid prefix, created."""
    t = ControlTopics.with_prefix("t" + uuid.uuid4().hex[:10])
    ensure_topics(conn, t.specs())
    return t
