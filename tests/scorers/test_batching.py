"""Micro-batches are bounded in rows, not messages (real broker, real Arrow payloads)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from headrace.scorers.engine.batching import Batcher, rows_in
from headrace.scorers.engine.stream_io import StreamIO
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import encode_arrow
from headrace.streams.consuming import BatchConsumer
from tests.scorers.conftest import FEATURES, send_arrow, send_json


def _io(conn: KafkaConnection, topic: str) -> StreamIO:
    return StreamIO(conn, BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic],
                                        partitions=[0]))


def _batches(io: StreamIO, batcher: Batcher, total_rows: int) -> list[tuple[int, list[int]]]:
    """(rows, offsets) of each batch until ``total_rows`` rows were read."""
    out: list[tuple[int, list[int]]] = []
    stop = threading.Event()
    for _ in range(200):
        if sum(r for r, _ in out) >= total_rows:
            break
        b = batcher.next_batch(stop)
        if len(b):
            out.append((rows_in(b), b.offsets.tolist()))
    return out


def test_arrow_batches_stop_near_batch_size_rows(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory()
    x = np.zeros((100, len(FEATURES)), np.float32)
    send_arrow(conn, topic, [pa.table({f: x[:, j] for j, f in enumerate(FEATURES)})] * 40)
    io = _io(conn, topic)
    try:
        # All 40 messages are fetched at once; before, the first batch took them all (4000 rows).
        batches = _batches(io, Batcher(io, max_rows=1000, max_wait_s=2.0), 4000)
    finally:
        io.close(timeout_s=1)
    assert [r for r, _ in batches] == [1000, 1000, 1000, 1000]
    assert [o for _, offs in batches for o in offs] == list(range(40))


def test_json_batches_take_batch_size_messages(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory()
    send_json(conn, topic, [{f: float(i) for f in FEATURES} for i in range(2500)])
    io = _io(conn, topic)
    try:
        batches = _batches(io, Batcher(io, max_rows=1000, max_wait_s=2.0), 2500)
    finally:
        io.close(timeout_s=1)
    assert [r for r, _ in batches] == [1000, 1000, 500]
    assert [o for _, offs in batches for o in offs] == list(range(2500))


def test_a_batch_closes_early_at_its_decoded_bytes_budget_and_carries_the_rest(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory()
    # Bools are bits on the wire; the budget counts them decoded (a byte, a float64, the input).
    t = pa.table({f: np.arange(20_000) % 2 == 0 for f in FEATURES})
    send_arrow(conn, topic, [t] * 6)
    io = _io(conn, topic)
    batcher = Batcher(io, max_rows=10**6, max_wait_s=0.5)
    cost = batcher.costs([encode_arrow(t)])[0]
    assert cost > 20_000 * len(FEATURES) * 9
    batcher.max_bytes = int(cost * 2.5)
    try:
        batches = _batches(io, batcher, 6 * 20_000)
    finally:
        io.close(timeout_s=1)
    # Within the budget: two messages a batch (one consume may have fetched all six).
    assert [offs for _, offs in batches] == [[0, 1], [2, 3], [4, 5]]
