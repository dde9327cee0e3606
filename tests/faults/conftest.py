"""Fixtures for fault tests: scorer processes cleaned up, a published tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection
from tests.faults.harness import (
    Scorers,
    Stream,
    free_port,
    new_stream,
    publish_tiny_model,
    scorer_entry_point,
)

needs_scorer = pytest.mark.skipif(
    scorer_entry_point() is None,
    reason="no scorer entry point (headrace score / python -m headrace.scorers)")


@pytest.fixture
def stream(conn: KafkaConnection) -> Stream:
    return new_stream(conn, partitions=3)


@pytest.fixture
def model(dfs: Path, stream: Stream) -> str:
    name = f"m{stream.name[1:]}"
    publish_tiny_model(dfs, name)
    return name


@pytest.fixture
def scorers(broker: str, dfs: Path, stream: Stream, model: str,
            tmp_path: Path) -> Iterator[Scorers]:
    s = Scorers(stream=stream, model=model, bootstrap=broker, dfs=dfs, log_dir=tmp_path)
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """An embedded broker of the test's own, on a fixed port, so it can be stopped and
    started again at the same address."""
    b = EmbeddedBroker(port=free_port(), log_path=tmp_path / "tansu.log").start()
    try:
        yield b
    finally:
        b.stop()
