"""Helpers for ops tests: write known records (``tests.fixtures.read_all`` reads them back)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from headrace.streams.clients import KafkaConnection, make_producer


@dataclass(frozen=True)
class Written:
    partition: int
    offset: int
    key: bytes
    value: bytes
    timestamp_ms: int


def write_records(
    conn: KafkaConnection, topic: str, *, per_partition: int, partitions: int = 1,
    base_ms: int | None = None, step_ms: int = 10, tag: str = "r",
) -> list[Written]:
    """``per_partition`` records into each partition, in multi-record batches (flushed once:
    the case where the embedded broker's high watermark is wrong), timestamps
    ``base_ms + i * step_ms``, a header each."""
    base = base_ms if base_ms is not None else int(time.time() * 1000) - 3_600_000
    p = make_producer(conn)
    acks: list[Written] = []

    def cb(err: object, msg: object) -> None:
        assert err is None, err
        acks.append(Written(msg.partition(), msg.offset(), msg.key(), msg.value(),  # type: ignore[attr-defined]
                            msg.timestamp()[1]))  # type: ignore[attr-defined]

    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), key=f"k{i % 7}".encode(),
                      partition=part, timestamp=base + i * step_ms,
                      headers=[("content-type", b"application/json"), ("n", str(i).encode())],
                      on_delivery=cb)
    assert p.flush(30) == 0
    return sorted(acks, key=lambda w: (w.partition, w.offset))


@pytest.fixture
def writer(conn: KafkaConnection) -> Callable[..., list[Written]]:
    def w(topic: str, **kw: object) -> list[Written]:
        return write_records(conn, topic, **kw)  # type: ignore[arg-type]

    return w
