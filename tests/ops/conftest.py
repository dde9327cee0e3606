"""Helpers for ops tests: write known records, read back what a fresh consumer sees."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from headrace.streams.clients import KafkaConnection, make_producer, partition_count
from headrace.streams.reading import Record, probe_ends, read_range


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


def read_all(conn: KafkaConnection, topic: str) -> list[Record]:
    """Every record a fresh consumer reads, to the verified end of every partition."""
    n = partition_count(conn, topic)
    assert n is not None
    bounds = probe_ends(conn, topic, range(n))
    return read_range(conn, topic, {p: (lo, end) for p, (lo, end) in bounds.items()})


@pytest.fixture
def writer(conn: KafkaConnection) -> Callable[..., list[Written]]:
    def w(topic: str, **kw: object) -> list[Written]:
        return write_records(conn, topic, **kw)  # type: ignore[arg-type]

    return w
