from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from headrace.core.settings import Settings
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.codecs import decode_arrow
from headrace.streams.topics import catalog
from tests.scorers.conftest import (
    FEATURES,
    publish_tf,
    rows,
    score,
    send_arrow,
    send_json,
    send_raw,
)


def _table(n: int, seed: int) -> pa.Table:
    x = np.random.default_rng(seed).normal(size=(n, len(FEATURES))).astype(np.float32)
    return pa.table({f: x[:, j] for j, f in enumerate(FEATURES)})


def test_arrow_batches_get_one_arrow_prediction_batch_each(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    mv = publish_tf(dfs, stream)
    tables = [_table(300 + i, i) for i in range(6)]
    x = np.random.default_rng(7).normal(size=(40, len(FEATURES))).astype(np.float32)
    x[[3, 17], 1] = np.nan  # two poison rows inside one batch
    tables.append(pa.table({f: x[:, j] for j, f in enumerate(FEATURES)}))
    send_arrow(conn, data, tables)
    msgs, dead = score(settings, conn, expect=len(tables), dead=2)
    assert len(msgs) == len(tables)
    out = {m.key().decode(): decode_arrow(m.value()) for m in msgs}
    assert all(hdr.get(m.headers(), hdr.CONTENT_TYPE) == hdr.ARROW for m in msgs)
    for i, t in enumerate(tables):
        pred = out[f"batch{i}"]
        expect = t.num_rows - (2 if i == len(tables) - 1 else 0)
        assert pred.num_rows == expect
        assert set(pred.column("model_version").to_pylist()) == {mv.version}
        assert set(pred.column("key").to_pylist()) == {f"batch{i}"}
        assert pred.schema.field("scores").type == pa.list_(pa.float32())
    last = out[f"batch{len(tables) - 1}"]
    assert 3 not in last.column("row").to_pylist() and 17 not in last.column("row").to_pylist()
    assert len(dead) == 2
    rows_dead = sorted(int(hdr.get(m.headers(), dlq.DLQ_ROW) or -1) for m in dead)
    assert rows_dead == [3, 17]
    for m in dead:
        assert hdr.get(m.headers(), dlq.DLQ_STAGE) == "validate"
        assert decode_arrow(m.value()).num_rows == 1  # just the bad row


def test_poison_json_goes_to_the_dlq_and_the_partition_keeps_flowing(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str) -> None:
    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings), replication_factor=1)
    publish_tf(dfs, stream)
    # Everything on partition 0 (one key) so the poison sits between good records.
    good_before = rows(300, seed=3)
    p = make_producer(conn)
    poison = [
        b"not json at all",
        b'{"a": 1, "b": 2, "c": 3}',  # missing feature d
        b'{"a": "x", "b": 2, "c": 3, "d": 4}',  # non-numeric
        b'{"a": 1e999, "b": 2, "c": 3, "d": 4}',  # infinite
        b"",
    ]
    expected_good = 0
    for i, r in enumerate(good_before):
        p.produce(data, json.dumps(r).encode(), f"g{i}", partition=0,
                  headers=[(hdr.CONTENT_TYPE, b"application/json")])
        expected_good += 1
        if i % 60 == 0 and i // 60 < len(poison):
            p.produce(data, poison[i // 60], f"bad{i // 60}", partition=0,
                      headers=[(hdr.CONTENT_TYPE, b"application/json")])
    assert p.flush(10) == 0
    preds, dead = score(settings, conn, expect=expected_good, dead=len(poison))
    assert len(preds) == expected_good
    assert sorted(json.loads(m.value())["key"] for m in preds) == sorted(
        f"g{i}" for i in range(expected_good))
    assert len(dead) == len(poison)
    by_key = {m.key().decode(): m for m in dead}
    for j, value in enumerate(poison):
        m = by_key[f"bad{j}"]
        h = hdr.to_dict(m.headers())
        assert (m.value() or b"") == value
        assert h[dlq.DLQ_TOPIC] == data and h[dlq.DLQ_PARTITION] == "0"
        assert int(h[dlq.DLQ_OFFSET]) >= 0 and h[dlq.DLQ_ERROR_CLASS] and h[dlq.DLQ_ERROR_MESSAGE]
        assert h[dlq.DLQ_STAGE] in ("decode", "validate")


def test_mixed_json_and_arrow_in_one_stream(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream)
    send_json(conn, data, rows(100))
    send_arrow(conn, data, [_table(64, 1)])
    send_raw(conn, data, [b"\x00garbage"], content_type=hdr.ARROW)
    msgs, dead = score(settings, conn, expect=101, dead=1)
    cts = [hdr.get(m.headers(), hdr.CONTENT_TYPE) for m in msgs]
    assert cts.count(hdr.JSON) == 100 and cts.count(hdr.ARROW) == 1
    assert len(dead) == 1 and hdr.get(dead[0].headers(), dlq.DLQ_STAGE) == "decode"
