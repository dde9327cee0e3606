"""10 000 generated malformed inputs mixed with good ones: each bad one dead-lettered exactly once
with its reason, each good one scored, and the scorer process never restarts."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pyarrow as pa
import pytest

from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import MAX_RECORD_BYTES, encode_arrow
from tests import real_kafka
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    FEATURES,
    JSON_HEADERS,
    Headers,
    Scorers,
    Stream,
    TopicReader,
    check,
    dlq_reason,
    figures,
    good_record,
    produce_all,
    wait_covered,
)

pytestmark = [pytest.mark.slow, needs_scorer]
ARROW_HEADERS: Headers = [(hdr.CONTENT_TYPE, hdr.ARROW.encode())]
BAD = 10_000
GOOD = 2_000
OVERSIZED = 2


def _features(rnd: random.Random) -> dict[str, object]:
    return {f: round(rnd.uniform(-1, 1), 3) for f in FEATURES}


def _with(rnd: random.Random, value: object) -> bytes:
    rec = _features(rnd)
    rec[rnd.choice(FEATURES)] = value
    return json.dumps(rec).encode()


def _arrow_ok(rnd: random.Random) -> bytes:
    return encode_arrow(pa.table({f: [rnd.uniform(-1, 1)] * 3 for f in FEATURES}))


def bad_input(kind: str, rnd: random.Random) -> tuple[bytes | None, Headers]:
    """One malformed input of ``kind``; (value, headers)."""
    if kind == "random-bytes":
        return rnd.randbytes(rnd.randint(1, 300)), JSON_HEADERS
    if kind == "random-bytes-as-arrow":
        return rnd.randbytes(rnd.randint(1, 300)), ARROW_HEADERS
    if kind == "truncated-arrow":
        b = _arrow_ok(rnd)
        return b[: rnd.randint(1, len(b) - 1)], ARROW_HEADERS
    if kind == "truncated-json":
        b = good_record(rnd.randint(0, 10**6))
        return b[: rnd.randint(1, len(b) - 2)], JSON_HEADERS
    if kind == "wrong-type":
        wrong: object = rnd.choice(["abc", "1.5", True, [1, 2], {"x": 1}, None])
        return _with(rnd, wrong), JSON_HEADERS
    if kind == "missing-feature":
        rec = _features(rnd)
        del rec[rnd.choice(FEATURES)]
        return json.dumps(rec).encode(), JSON_HEADERS
    if kind == "not-an-object":
        return rnd.choice([b"[1,2,3]", b"42", b'"x"', b"true"]), JSON_HEADERS
    if kind == "json-null":  # the JSON literal null: pyarrow.json segfaults on it alone
        return b"null", JSON_HEADERS
    if kind == "nan-inf":
        return _with(rnd, rnd.choice([float("nan"), float("inf"), float("-inf")])), JSON_HEADERS
    if kind == "huge":  # finite in JSON, infinite as float32 (or even float64)
        return _with(rnd, rnd.choice([1e39, -1e300, 1.7e308])), JSON_HEADERS
    if kind == "huge-literal":
        return _with(rnd, 0).replace(b": 0", b": 1" + b"0" * 400, 1), JSON_HEADERS
    if kind == "empty":
        return rnd.choice([b"", None]), JSON_HEADERS
    if kind == "two-objects":
        return good_record(1) + b"\n" + good_record(2), JSON_HEADERS
    raise AssertionError(kind)


KINDS = ["random-bytes", "random-bytes-as-arrow", "truncated-arrow", "truncated-json",
         "wrong-type", "missing-feature", "not-an-object", "json-null", "nan-inf", "huge",
         "huge-literal", "empty", "two-objects"]


def test_ten_thousand_poison_inputs_each_dead_lettered_once_and_good_ones_scored(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    rnd = random.Random(1234)
    items: list[tuple[str, bytes | None, Headers]] = []
    for i in range(BAD):
        kind = KINDS[i % len(KINDS)]
        items.append((kind, *bad_input(kind, rnd)))
    items += [("good", good_record(i), JSON_HEADERS) for i in range(GOOD)]
    rnd.shuffle(items)
    oversized = b'{"f0": "' + b"x" * (MAX_RECORD_BYTES + 1024) + b'"}'
    real_kafka.allow_records_up_to(conn.bootstrap, stream.data, 16 * 1024 * 1024)
    for _ in range(OVERSIZED):  # over the scorer's record limit, under the broker's
        items.insert(rnd.randint(0, len(items)), ("oversized", oversized, JSON_HEADERS))
    acked = produce_all(conn, stream.data, [(v, h) for _, v, h in items],
                        **{"message.max.bytes": 16 * 1024 * 1024})
    assert len(acked) == len(items)
    kind_of = {off: items[i][0] for i, off in enumerate(acked)}
    good = {o for o, k in kind_of.items() if k == "good"}
    bad = set(kind_of) - good

    t0 = time.monotonic()
    s = scorers.start(batch_size=512)
    s.wait_ready()
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    took = wait_covered(preds, lambda: set(kind_of), data_topic=stream.data, timeout_s=50,
                        dlq=dlq, alive=s.alive)
    preds.drain(idle_s=1.0)
    dlq.drain(idle_s=1.0)
    c = check(set(kind_of), preds.records, dlq.records, data_topic=stream.data)
    stages = Counter(dlq_reason(d)[0] + ":" + dlq_reason(d)[1] for d in dlq.records)
    figures("poison_fuzz", **c.summary(), bad=len(bad), good=len(good),
            seconds=round(time.monotonic() - t0, 1), cover_s=round(took, 1),
            scorer_alive=s.alive(), dlq_reasons=dict(stages))
    missing_kinds = Counter(kind_of[o] for o in c.missing)
    assert not c.missing, \
        f"no outcome for {len(c.missing)} inputs: {dict(missing_kinds)}\n{s.log_tail()}"
    scored_bad = Counter(kind_of[o] for o in bad if o in c.by_offset)
    assert not scored_bad, f"malformed inputs were scored: {dict(scored_bad)}"
    dead_good = [o for o in good if o in c.dlq_by_offset]
    assert not dead_good, f"{len(dead_good)} good inputs dead-lettered: " \
        f"{[dlq_reason(c.dlq_by_offset[o][0]) for o in dead_good[:3]]}"
    assert not c.dlq_duplicates, f"dead-lettered more than once: {c.dlq_duplicates[:10]}"
    assert set(c.dlq_by_offset) == bad
    for off in bad:
        stage, cls, msg = dlq_reason(c.dlq_by_offset[off][0])
        assert stage and cls and msg, (kind_of[off], stage, cls, msg)
    assert c.duplicates == 0
    assert s.alive(), f"the scorer exited:\n{s.log_tail()}"
    assert s.probe("/livez") == 200
    rc, _ = s.terminate()
    assert rc == 0


def test_a_json_null_record_is_dead_lettered_and_does_not_crash_the_scorer(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    # Alone in its batch: pyarrow.json segfaults on a buffer holding only `null`.
    acked = produce_all(conn, stream.data, [(b"null", JSON_HEADERS)])
    s = scorers.start()
    s.wait_ready()
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    wait_covered(preds, lambda: set(acked), data_topic=stream.data, timeout_s=15, dlq=dlq,
                 alive=s.alive)
    if s.alive():
        acked += produce_all(conn, stream.data, [(good_record(1), JSON_HEADERS)])
        wait_covered(preds, lambda: set(acked), data_topic=stream.data, timeout_s=15, dlq=dlq,
                     alive=s.alive)
    c = check(set(acked), preds.records, dlq.records, data_topic=stream.data)
    figures("json_null", **c.summary(), scorer_alive=s.alive(), exit=s.proc.returncode)
    assert s.alive(), f"the scorer died (exit {s.proc.returncode}) on a `null` record"
    assert not c.missing
    assert set(c.dlq_by_offset) == {acked[0]}
