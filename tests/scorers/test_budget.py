"""The scorer's memory budget (caps from the Arrow metadata), prediction splitting, and producer
refusals: what they compute, checked against what decoding really allocates and what the real
producer and broker do."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from headrace.core.errors import ValidationFailed
from headrace.core.settings import Settings
from headrace.scorers.serving import scorer_topics
from headrace.scorers.wire import splitting
from headrace.scorers.wire.budget import MessageCaps, admit, arrow_cost, message_measure
from headrace.scorers.wire.decoding import tabular_row_bytes
from headrace.scorers.wire.encoding import ARROW_HEADERS, arrow_prediction_table, arrow_predictions
from headrace.scorers.wire.inputs import InputLimits, decode_inputs
from headrace.streams import topics
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import decode_arrow, encode_arrow
from headrace.streams.consuming import RawBatch
from headrace.streams.producing import BatchProducer
from tests.scorers.signature_models import META

MiB = 1024 * 1024


def zstd(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema,
                        options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table, max_chunksize=table.num_rows)
    return bytes(sink.getvalue().to_pybytes())


def bools(rows: int, cols: int) -> bytes:
    col = pa.array(np.arange(rows) % 3 == 0)
    return zstd(pa.table({f"f{i}": col for i in range(cols)}))


def test_the_issue_bomb_is_refused_from_its_metadata() -> None:
    bomb = bools(4_000_000, 32)
    assert len(bomb) < 50_000
    cost = arrow_cost(bomb, tabular_row_bytes(32))
    # Bits on the wire (16 MB) but at least a byte, a float64 and the float32 input a row.
    assert cost.rows == 4_000_000 and cost.decoded_bytes > 4_000_000 * 32 * (1 + 8 + 4)
    with pytest.raises(ValidationFailed, match=r"4000000 rows\), over the per-message limit"):
        admit(bomb, caps=MessageCaps(), max_arrow_bytes=1 << 40,
              input_row_bytes=tabular_row_bytes(32))
    with pytest.raises(ValidationFailed, match="holds 4000000 rows, over the per-message limit"
                                               " of 1000000"):
        admit(bomb, caps=MessageCaps(max_rows=1_000_000, max_bytes=1 << 40),
              max_arrow_bytes=1 << 40)


def test_small_messages_pass_and_what_is_not_arrow_is_refused() -> None:
    value = encode_arrow(pa.table({"a": [1.0, 2.0], "b": [True, False]}))
    cost = admit(value, caps=MessageCaps(max_rows=2, max_bytes=4096), max_arrow_bytes=4096)
    assert cost.rows == 2 and 0 < cost.decoded_bytes < 4096
    with pytest.raises(ValidationFailed, match="undecodable Arrow IPC"):
        arrow_cost(b"\xff\xff\xff\xff" + b"\x10\x00\x00\x00" + b"junk" * 4)
    assert message_measure(b'{"a": 1}', False) == (1, 8)  # JSON: a row, its payload
    # Unreadable: one row, its length (dead-lettered unread).
    assert message_measure(b"\xff\xff\xff\xffjunk", True) == (1, 8)
    assert message_measure(value, True)[0] == 2


_MEASURE = """
import sys, numpy as np
from headrace.scorers.wire.budget import MessageCaps, arrow_cost
from headrace.scorers.wire.decoding import decode, tabular_row_bytes
from headrace.streams.consuming import RawBatch
value = open(sys.argv[1], "rb").read()
est = arrow_cost(value, tabular_row_bytes(16)).decoded_bytes
batch = RawBatch([value], [None], ["t"], np.zeros(1, np.int32), np.zeros(1, np.int64),
                 np.zeros(1, np.int64), [None])
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) restarts from here
before = status("VmRSS")
f = decode(batch, [f"f{i}" for i in range(16)], caps=MessageCaps(1 << 40, 1 << 40))
assert f.num_rows == 1_000_000, f.bad
print(est, status("VmHWM") - before)
"""


@pytest.mark.parametrize("kind", ["bool", "float32"])
def test_the_estimate_bounds_what_decoding_really_allocates(tmp_path: Path, kind: str) -> None:
    rows = 1_000_000
    if kind == "bool":
        value = bools(rows, 16)
    else:
        col = pa.array((np.arange(rows) % 7).astype(np.float32))
        value = zstd(pa.table({f"f{i}": col for i in range(16)}))
    path = tmp_path / "msg.arrow"
    path.write_bytes(value)
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, f"the measuring process failed:\n{out.stderr[-2000:]}"
    est, grew = map(int, out.stdout.split())
    assert grew <= est, f"decoding grew the peak RSS by {grew} bytes, the estimate was {est}"
    assert est <= 8 * max(grew, 16 * MiB), f"estimate {est} is far above the real {grew}"


def _predictions(rows: int) -> bytes:
    scores = np.random.default_rng(0).random((rows, 2)).astype(np.float32)
    return arrow_predictions(arrow_prediction_table(
        key=b"k", source_topic="data.s", partition=2, offset=41,
        rows=np.arange(rows, dtype=np.int32), model_name="m", model_version=3, scores=scores,
        classes=("no", "yes")))


def test_a_prediction_over_the_limit_is_split_into_parts_tied_by_headers() -> None:
    value = _predictions(6000)
    limit = 64 * 1024
    assert len(value) > limit
    parts = splitting.split(value, b"k", ARROW_HEADERS, limit)
    assert parts is not None and len(parts) > 1
    rows = []
    for i, p in enumerate(parts):
        h = dict(p.headers)
        assert h[splitting.SOURCE] == b"data.s/2/41"
        assert (h[splitting.PART], h[splitting.PARTS]) == (str(i).encode(),
                                                           str(len(parts)).encode())
        assert len(p.value) + len(p.key or b"") + sum(len(k) + len(v) for k, v in p.headers) \
            < limit - 40
        rows += decode_arrow(p.value).column("row").to_pylist()
    assert rows == list(range(6000))
    assert splitting.split(_predictions(10), b"k", ARROW_HEADERS, limit) is None  # fits
    assert splitting.split(_predictions(1), b"k", ARROW_HEADERS, 100) is None  # cannot help


def test_the_producer_names_what_it_refuses_instead_of_raising(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory()
    p = BatchProducer(conn, **{"message.max.bytes": 8192})
    try:
        refused = p.produce_many(topic, [b"ok", b"x" * 20_000, b"ok too"], [b"a", b"b", None],
                                 [])
        p.flush(10)
    finally:
        p.close(5)
    assert [(r.value, r.key, r.permanent) for r in refused] == [(b"x" * 20_000, b"b", True)]
    assert refused[0].reason.startswith("MSG_SIZE_TOO_LARGE") and p.max_message_bytes == 8192


def test_the_scorer_creates_its_topics_with_min_insync_replicas(broker: str, dfs: Path) -> None:
    s = Settings(bootstrap=broker, dfs_root=dfs, replication_factor=2, min_insync_replicas=2)
    stream = f"s{uuid.uuid4().hex[:6]}"
    specs = scorer_topics(s, stream)  # the specs ensure_topics gets (the broker has one node)
    control = topics.ControlTopics()
    assert {sp.name for sp in specs} == {
        topics.data_topic(stream), topics.predictions_topic(stream), topics.dlq_topic(stream),
        control.models, control.jobs, control.rollout, control.rollout_live, control.drift,
        control.drift_state, control.lineage}
    assert all(sp.config.get("min.insync.replicas") == "2" for sp in specs)


def test_signature_models_refuse_a_message_over_the_caps_and_decode_the_rest() -> None:
    cols = {c: pa.array(np.arange(50_000) % 2 == 0) for c in META.columns}
    many = zstd(pa.table(cols))  # a few KB; ~50 000 rows of bools widened to float32 inputs
    few = encode_arrow(pa.table({c: [1.0, 2.0] for c in META.columns}))
    values = [many, few]
    n = len(values)
    batch = RawBatch(values, [None] * n, ["data.t"] * n, np.zeros(n, np.int32),
                     np.arange(n, dtype=np.int64), np.zeros(n, np.int64), [None] * n)
    dec = decode_inputs(batch, (META,), InputLimits(message=MessageCaps(max_rows=10_000)))
    assert [(b.message, b.stage) for b in dec.bad] == [(0, "decode")]
    assert "holds 50000 rows, over the per-message limit of 10000" in str(dec.bad[0].error)
    assert dec.message.tolist() == [1, 1]
    dec = decode_inputs(batch, (META,), InputLimits(message=MessageCaps(max_bytes=1 << 20)))
    assert "over the per-message limit of 1048576" in str(dec.bad[0].error)
