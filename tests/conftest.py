"""Shared fixtures: one embedded broker per test session, uuid topic names, a temp DFS."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headrace.core.settings import Settings, load_settings
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers.datasets import make_demo


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers: ``HEADRACE_TEST_BOOTSTRAP`` (a real Kafka) or one embedded broker."""
    external = os.environ.get("HEADRACE_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    b = EmbeddedBroker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log").start()
    try:
        yield b.bootstrap
    finally:
        b.stop()


@pytest.fixture(scope="session")
def conn(broker: str) -> KafkaConnection:
    return KafkaConnection(bootstrap=broker, timeout_s=15.0)


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
