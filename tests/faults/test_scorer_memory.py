"""A scorer no message can take down (issue 28), on the real broker with a real scorer process.

* The 4,560-byte zstd bomb (32 bool columns x 4 M rows) and eight ~10 KB messages padded to just
  under the old 256 MiB decompression cap are dead-lettered with their reasons, from the Arrow
  metadata alone: the scorer stays up, its peak RSS grows by < 256 MiB, good records before
  and after are scored, and after a SIGKILL the restarted scorer does not meet them again.
* Messages each just under the per-message cap go one batch each (the batch budget), scored.
* An input whose Arrow predictions exceed the producer's ``message.max.bytes`` gets them split
  into parts tied by headers, none lost; a prediction no split can shrink (one row) dead-letters
  its input with the producer's reason instead of escaping the loop.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.scorers.wire import splitting
from headrace.store.manifest import Manifest
from headrace.store.versions import publish, set_alias
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import decode_arrow, encode_arrow
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    FEATURES,
    JSON_HEADERS,
    Headers,
    Out,
    ScorerProcess,
    Scorers,
    Stream,
    TopicReader,
    committed,
    dlq_reason,
    figures,
    good_record,
    produce_all,
    wait_dead_letters,
    write_keras_mlp,
)
from tests.fixtures import eventually
from tests.scorers.test_budget import zstd

pytestmark = [pytest.mark.slow, needs_scorer]
ARROW_HEADERS: Headers = [(hdr.CONTENT_TYPE, hdr.ARROW.encode())]
MiB = 1024 * 1024


def bool_bomb() -> bytes:
    """The issue's bomb: 32 bool columns (the model's features among them) x 4 M rows."""
    n = 4_000_000
    zeros = pa.array(np.zeros(n, bool))
    return zstd(pa.table({f"f{i}": zeros for i in range(32)}))


def padded(pad_bytes: int) -> bytes:
    """Four good rows and one binary cell of ``pad_bytes`` zeros: ~10 KB of zstd."""
    feats = {f: pa.array(np.linspace(-1, 1, 4), pa.float32()) for f in FEATURES}
    pad = pa.array([b"\0" * pad_bytes, b"", b"", b""], pa.binary())
    return zstd(pa.table({**feats, "pad": pad}))


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def reset_peak(pid: int) -> int:
    """Restart the process's peak resident set (VmHWM) from now; its resident set now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid, "VmRSS")


def peak_rss(pid: int) -> int:
    """VmHWM: the process's peak resident set since the last ``reset_peak``, bytes."""
    return _status(pid, "VmHWM")


def json_outcomes(preds: list[Out], dlq: list[Out]) -> tuple[set[tuple[int, int]],
                                                             dict[tuple[int, int], list[Out]]]:
    scored = {(int(p["source_partition"]), int(p["source_offset"]))
              for p in (json.loads(r.value) for r in preds if r.value[:1] == b"{")}
    letters: dict[tuple[int, int], list[Out]] = {}
    for d in dlq:
        key = (int(d.headers["dlq.source-partition"]), int(d.headers["dlq.source-offset"]))
        letters.setdefault(key, []).append(d)
    return scored, letters


def assert_refused_outputs_dead_lettered(
        conn: KafkaConnection, stream: Stream, s: ScorerProcess, offsets: list[tuple[int, int]],
        letters: dict[tuple[int, int], list[Out]], preds: TopicReader) -> None:
    """Each input whose prediction the producer (or the broker) refused as too large is
    dead-lettered once at the produce stage, its offset committed, nothing predicted; the
    scorer is alive."""
    assert s.alive(), s.log_tail()
    assert set(letters) == set(offsets) and all(len(v) == 1 for v in letters.values())
    for ls in letters.values():
        stage, cls, msg = dlq_reason(ls[0])
        assert (stage, cls) == ("produce", "OutputRefused") and "MSG_SIZE_TOO_LARGE" in msg
    want = {p: o + 1 for p, o in offsets}
    eventually(lambda: all(committed(conn, stream.group, stream.data).get(p, -1) >= o
                           for p, o in want.items()), timeout_s=20, what="commits")
    assert not preds.drain(idle_s=0.5, timeout_s=3)


def wait_outcomes(conn: KafkaConnection, stream: Stream, s: ScorerProcess,
                  good: set[tuple[int, int]], bad: set[tuple[int, int]], *,
                  preds: TopicReader, dlq: TopicReader, timeout_s: float = 60.0) -> None:
    def done() -> bool:
        assert s.alive(), f"the scorer exited {s.proc.returncode}:\n{s.log_tail()}"
        preds.poll(0.2)
        dlq.poll(0.05)
        scored, letters = json_outcomes(preds.records, dlq.records)
        return good <= scored and bad <= set(letters)

    eventually(done, timeout_s=timeout_s, interval_s=0.1, what="every input's outcome")


def test_bombs_and_padded_messages_are_dead_lettered_once_and_the_scorer_stays_up(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    bomb = bool_bomb()
    pad = padded(256 * MiB - 64 * 1024)  # just under the old decompression cap
    assert len(bomb) < 5000 and len(pad) < 64 * 1024
    s = scorers.start(batch_size=1024)
    s.wait_ready()
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    before = produce_all(conn, stream.data, [(good_record(i), JSON_HEADERS) for i in range(30)])
    wait_outcomes(conn, stream, s, set(before), set(), preds=preds, dlq=dlq)
    rss0 = reset_peak(s.pid)

    # The bomb and eight padded messages, all in one batch's reach, good records around them.
    values = [(bomb, ARROW_HEADERS)] + [(pad, ARROW_HEADERS)] * 8
    offsets = produce_all(conn, stream.data, [(good_record(100 + i), JSON_HEADERS)
                                              for i in range(6)] + values + [
        (good_record(200 + i), JSON_HEADERS) for i in range(6)])
    good = set(offsets[:6] + offsets[-6:])
    bad = set(offsets[6:-6])
    wait_outcomes(conn, stream, s, good | set(before), bad, preds=preds, dlq=dlq)
    grew = peak_rss(s.pid) - rss0
    scored, letters = json_outcomes(preds.records, dlq.records)
    reasons = {o: dlq_reason(ls[0]) for o, ls in letters.items()}
    figures("scorer_memory_bombs", bomb_bytes=len(bomb), padded_bytes=len(pad),
            rss_growth_mib=round(grew / MiB, 1), dead_letters=len(dlq.records),
            scored=len(scored))
    assert grew < 256 * MiB, f"peak RSS grew by {grew / MiB:.0f} MiB"
    assert set(letters) == bad and not bad & scored
    for off in bad:
        stage, cls, msg = reasons[off]
        assert stage == "decode" and cls == "ValidationFailed", reasons[off]
        assert "over the per-message limit" in msg, msg
    assert "4000000 rows" in reasons[offsets[6]][2]
    assert all(len(ls) == 1 for ls in letters.values())

    # Their offsets are committed: a scorer killed now and started again never meets them.
    want = {p: max(o for q, o in offsets + before if q == p) + 1 for p, _ in offsets + before}
    eventually(lambda: all(committed(conn, stream.group, stream.data).get(p, -1) >= o
                           for p, o in want.items()), timeout_s=20, what="commits")
    s.signal(signal.SIGKILL)
    s.wait(10)
    again = scorers.start(batch_size=1024)
    again.wait_ready()
    after = produce_all(conn, stream.data, [(good_record(300 + i), JSON_HEADERS)
                                            for i in range(10)])
    wait_outcomes(conn, stream, again, set(after), set(), preds=preds, dlq=dlq)
    dlq.drain(idle_s=1.0)
    _, letters = json_outcomes(preds.records, dlq.records)
    assert all(len(ls) == 1 for ls in letters.values()), "a restart met a dead letter again"
    assert set(letters) == bad
    assert again.alive() and again.probe("/livez") == 200


def test_messages_just_under_the_cap_are_scored_one_batch_each(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    cap = 48 * MiB
    msg = padded(cap - MiB)  # decodes to just under the cap
    s = scorers.start(batch_size=1024, extra_env={
        "HEADRACE_SCORER_MAX_MESSAGE_BYTES": str(cap),
        "HEADRACE_SCORER_MAX_BATCH_BYTES": str(cap)})
    s.wait_ready()
    rss0 = reset_peak(s.pid)
    offsets = produce_all(conn, stream.data, [(msg, ARROW_HEADERS)] * 8)
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)

    def all_scored() -> bool:
        assert s.alive(), s.log_tail()
        preds.poll(0.2)
        return len(preds.records) >= len(offsets)

    eventually(all_scored, timeout_s=60, interval_s=0.1, what="eight scored messages")
    dlq.drain(idle_s=0.5, timeout_s=3)
    grew = peak_rss(s.pid) - rss0
    tables = [decode_arrow(r.value) for r in preds.records]
    sources = {(int(t.column("source_partition")[0].as_py()),
                int(t.column("source_offset")[0].as_py())) for t in tables}
    figures("scorer_memory_under_cap", messages=len(offsets), rss_growth_mib=round(grew / MiB))
    assert sources == set(offsets) and all(t.num_rows == 4 for t in tables)
    assert not dlq.records
    assert grew < 256 * MiB, f"peak RSS grew by {grew / MiB:.0f} MiB"


def _many_class_model(dfs: Path, name: str, classes: int) -> None:
    labels = tuple(f"c{i}" for i in range(classes))
    m = Manifest(name=name, framework="tensorflow", task="classifier", features=FEATURES,
                 label="y", classes=labels)
    mv = publish(dfs, m, lambda d: write_keras_mlp(d, outputs=classes))
    set_alias(dfs, name, mv.version, alias="production")


def test_predictions_over_the_producer_limit_are_split_none_lost(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    limit = 64 * 1024
    rows = 6000
    x = np.random.default_rng(0).uniform(-1, 1, (rows, len(FEATURES))).astype(np.float32)
    value = encode_arrow(pa.table({f: x[:, j] for j, f in enumerate(FEATURES)}))
    s = scorers.start(extra_env={"HEADRACE_SCORER_MESSAGE_MAX_BYTES": str(limit)})
    s.wait_ready()
    items = [(good_record(1), JSON_HEADERS), (value, ARROW_HEADERS),
             (good_record(2), JSON_HEADERS)]
    offsets = produce_all(conn, stream.data, items, **{"message.max.bytes": 4 * MiB})
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    source = f"{stream.data}/{offsets[1][0]}/{offsets[1][1]}"

    def parts() -> list[Out]:
        return [r for r in preds.records if r.headers.get(splitting.SOURCE) == source]

    def complete() -> bool:
        assert s.alive(), s.log_tail()
        preds.poll(0.2)
        got = parts()
        return bool(got) and len({r.headers[splitting.PART] for r in got}) == int(
            got[0].headers[splitting.PARTS])

    eventually(complete, timeout_s=60, interval_s=0.1, what="every part")
    preds.drain(idle_s=1.0)
    dlq.drain(idle_s=0.5, timeout_s=3)
    got = parts()
    n = int(got[0].headers[splitting.PARTS])
    by_part = {int(r.headers[splitting.PART]): decode_arrow(r.value) for r in got}
    all_rows = np.concatenate([by_part[i].column("row").to_numpy() for i in range(n)])
    scored, letters = json_outcomes(preds.records, dlq.records)
    figures("prediction_split", rows=rows, limit=limit, parts=n,
            largest=max(len(r.value) for r in got))
    assert n > 1 and sorted(by_part) == list(range(n))
    assert all(len(r.value) < limit for r in got)
    assert sorted(all_rows.tolist()) == list(range(rows))  # none lost, none twice
    assert {offsets[0], offsets[2]} <= scored and not letters


def test_a_prediction_no_split_can_fit_dead_letters_its_input_and_the_loop_goes_on(
        conn: KafkaConnection, stream: Stream, dfs: Path, scorers: Scorers) -> None:
    name = f"w{stream.name[1:]}"
    _many_class_model(dfs, name, classes=3000)  # one row's prediction: 12 KB in Arrow
    s = scorers.start(model=name, extra_env={"HEADRACE_SCORER_MESSAGE_MAX_BYTES": "8192"})
    s.wait_ready()
    one_row = encode_arrow(pa.table({f: [0.5] for f in FEATURES}))
    offsets = produce_all(conn, stream.data, [(good_record(1), JSON_HEADERS),
                                              (one_row, ARROW_HEADERS)])
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)

    wait_dead_letters(s, dlq, 2)
    _, letters = json_outcomes(preds.records, dlq.records)
    figures("prediction_refused", dead_letters=len(dlq.records), alive=s.alive())
    assert_refused_outputs_dead_lettered(conn, stream, s, offsets, letters, preds)

