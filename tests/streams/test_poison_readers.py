"""No poison that sticks: every reader of a Kafka topic, fed any bytes, skips (or reports) the bad
record and goes on; the next good record is read as before.

Each reader's own per-record code is called with generated records (a fixed seed: random bytes,
nesting 100,000 deep, values over the limits, wrong JSON types, non-UTF-8, tombstones, huge or
non-UTF-8 keys and headers), the Kafka iteration replaced by a list where the reader loops over
one. The end-to-end checks on the embedded broker are in test_poison_e2e.py.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.contracts import (
    DriftDetected,
    JobEvent,
    JobEventKind,
    LiveCounts,
    RolloutRole,
    RolloutState,
)
from headrace.core import bounded_json
from headrace.core.bad_records import BadRecords
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.streams.reading import Record

SEED = 34
PER_KIND = 8
TOPIC = "t"


# --- the generated records -------------------------------------------------------------------


def _values(rnd: random.Random) -> Iterator[tuple[str, bytes | None]]:
    """(kind, value) of every poison kind, ``PER_KIND`` of each."""
    for _ in range(PER_KIND):
        yield "random-bytes", rnd.randbytes(rnd.randint(0, 400))
        yield "deep-array", b"[" * rnd.choice([1_000, 100_000])
        yield "deep-object", b'{"a":' * rnd.choice([1_000, 100_000])
        yield "deep-closed", b"[" * 5_000 + b"]" * 5_000
        yield "deep-in-field", b'{"label": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
        yield "huge", b'{"label": "' + b"x" * rnd.choice([2_000_000, 9_000_000]) + b'"}'
        yield "wrong-type", rnd.choice([b"[]", b"1", b'"x"', b"true", b"null", b"1e999",
                                        b'{"label": {"x": 1}}', b'{"label": [1]}',
                                        b'{"job_id": 5, "kind": []}', b'{"stream": null}'])
        yield "not-utf8", rnd.choice([b'"\xff\xfe"', b'{"label": "\xed\xa0\x80"}', b"\xff" * 9])
        yield "truncated", b'{"label": "ye'
        yield "tombstone", None
        yield "empty", b""


def _keys(rnd: random.Random) -> list[bytes | None]:
    return [None, b"", b"k1", rnd.randbytes(16), b"\xff\xfe", b"k" * 1_000_000]


def _headers(rnd: random.Random) -> list[tuple[tuple[str, bytes], ...]]:
    return [(), (("content-type", b"application/json"),),
            (("content-type", b"application/vnd.apache.arrow.stream"),),
            (("content-type", b"image/png"),),
            (("dlq.source-partition", "²".encode()), ("dlq.source-offset", b"\xff")),
            (("x" * 10_000, rnd.randbytes(100_000)),)]


def poison(seed: int = SEED) -> list[tuple[str, Record]]:
    rnd = random.Random(seed)
    keys, headers = _keys(rnd), _headers(rnd)
    out = []
    for n, (kind, value) in enumerate(_values(rnd)):
        out.append((kind, Record(TOPIC, 0, n, rnd.choice(keys), value, rnd.choice(headers),
                                 None)))
    return out


POISON = poison()


def good(value: bytes, key: bytes | None = b"k1", offset: int = 10**6) -> Record:
    return Record(TOPIC, 0, offset, key, value, (), None)


def test_the_poison_covers_every_kind() -> None:
    kinds = {k for k, _ in POISON}
    assert kinds >= {"deep-array", "deep-object", "huge", "wrong-type", "not-utf8", "tombstone",
                     "random-bytes"}
    assert any(r.key is not None and len(r.key) >= 1_000_000 for _, r in POISON)


# --- the bounded parser itself ---------------------------------------------------------------


def test_bounded_json_refuses_every_poison_with_one_clear_error_and_fast() -> None:
    slowest = 0.0
    for kind, rec in POISON:
        t = time.perf_counter()
        try:
            bounded_json.loads(rec.value)
        except ValidationFailed as exc:
            assert "xxxx" not in str(exc)  # the bytes are never quoted
        slowest = max(slowest, time.perf_counter() - t)
        if kind.startswith("deep"):
            with pytest.raises(ValidationFailed, match="nested deeper"):
                bounded_json.loads(rec.value, max_bytes=10**7)
    assert slowest < 1.0
    assert bounded_json.loads(b'{"a": ["[[[[", {"b": [1]}]}') == {"a": ["[[[[", {"b": [1]}]}
    assert bounded_json.nesting_depth(b'[[1, "]]]]"], {"a": {}}]') == 3


def test_bad_records_are_counted_and_logged_once_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    bad = BadRecords(logging.getLogger("t"), "label", clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for i in range(1000):
            bad.skip(f"t/0@{i}", ValidationFailed("not JSON: oops"))
        now[0] = 61.0
        bad.skip("t/0@1000", ValidationFailed("not JSON: oops"))
    assert bad.count == 1001
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "999 more like it" in lines[1]


# --- the label join (the reported finding) ---------------------------------------------------


def test_label_join_skips_every_poison_and_then_joins_a_valid_label() -> None:
    from headrace.scorers.rollout.label_join import LabelJoin, parse_label, take_label
    from tests.scorers.test_label_join import _comparison, _predict

    # The finding: [ x 100,000 raised RecursionError here and killed the labels thread.
    with pytest.raises(ValidationFailed):
        parse_label(b"[" * 100_000)
    join, comp = LabelJoin(max_records=100, max_age_s=60), _comparison()
    join.active = True
    bad = BadRecords(logging.getLogger("t"), "label")
    for _, rec in POISON:
        take_label(join, rec, bad)
    assert join.stats.bad == bad.count and bad.count > len(POISON) // 2
    _predict(join, comp, [b"good"], [1], [0])
    take_label(join, good(b'{"label": "yes"}', key=b"good"), bad)
    assert join.stats.joined == 1 and comp.total().labelled == 1


# --- tail -------------------------------------------------------------------------------------


def test_tail_decodes_and_prints_every_poison(capsys: pytest.CaptureFixture[str]) -> None:
    from headrace.cli.streams_cmd import _print
    from headrace.streams import headers as hdr
    from headrace.streams.tailing import TailedMessage, decode_value

    for _, rec in POISON:
        h = hdr.to_dict(list(rec.headers))
        msg = TailedMessage(rec.topic, rec.partition, rec.offset, 0,
                            None if rec.key is None else rec.key.decode("utf-8", "replace"),
                            h, decode_value(rec.value, h), rec.value)
        _print(msg, as_json=False)
        _print(msg, as_json=True)
    out = capsys.readouterr().out
    assert out.count("t[0]@") == len(POISON)
    assert max(len(line) for line in out.splitlines()) < 10_000_000


# --- the scorer's own decode ------------------------------------------------------------------


def test_the_scorers_decode_dead_letters_deep_nesting_instead_of_raising() -> None:
    from headrace.scorers.wire.decoding import decode
    from headrace.streams.consuming import RawBatch

    values = [b'{"a":' * 100_000, b'{"x": 1, "y": 2, "z": ' + b"[" * 100_000,
              b"[" * 100_000, b'{"x": 1, "y": 2}']
    n = len(values)
    batch = RawBatch(values, [None] * n, [TOPIC] * n, np.zeros(n, np.int32),
                     np.arange(n, dtype=np.int64), np.full(n, -1, np.int64), [None] * n)
    got = decode(batch, ["x", "y"])  # raised RecursionError before
    assert len(got.bad) == 3
    assert "nested too deep" in str(got.bad[0].error)


# --- control-topic readers of the scorer ------------------------------------------------------


def _counts() -> LiveCounts:
    return LiveCounts(stream="s", model_name="m", production_version=1, candidate_version=2,
                      role=RolloutRole.SHADOW, partition=0, next_offset=5, classes=["a", "b"],
                      matrix=[[0, 0], [0, 0]], production_truth=[[0, 0], [0, 0]],
                      candidate_truth=[[0, 0], [0, 0]])


def test_live_counts_and_rollout_followers_skip_poison_and_keep_reading() -> None:
    from headrace.scorers.rollout.live_counts import LiveCountsFollower, Pair
    from headrace.scorers.rollout.state import RolloutWatch

    follower = LiveCountsFollower(None, TOPIC, "s")  # type: ignore[arg-type]
    watch = RolloutWatch(None, TOPIC, "s")  # type: ignore[arg-type]
    for _, rec in POISON:
        keyed = Record(rec.topic, rec.partition, rec.offset, b"s|x", rec.value, rec.headers)
        follower.take(keyed)
        watch.take(Record(rec.topic, rec.partition, rec.offset, b"s", rec.value, rec.headers))
    assert follower.bad.count > 0 and watch.bad.count > 0
    lc = _counts()
    follower.take(good(lc.to_bytes(), key=lc.key()))
    assert follower.latest_for(Pair("s", "m", 1, 2, RolloutRole.SHADOW)) == {0: lc}
    state = RolloutState(stream="s", model_name="m", candidate_version=2,
                         role=RolloutRole.SHADOW, reason="t")
    watch.take(good(state.to_bytes(), key=b"s"))
    assert watch.current == state


def test_model_events_and_drift_states_skip_poison(monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.scorers import drift_tap
    from headrace.scorers.engine.stream_io import ModelEventsListener

    class Follow:
        def poll(self, timeout_s: float, max_messages: int) -> list[Record]:
            return [r for _, r in POISON]

        def close(self) -> None:
            pass

    listener = ModelEventsListener(None)  # type: ignore[arg-type]
    listener._follower = Follow()  # type: ignore[assignment]
    assert listener.poll(0.1) == [] and listener.bad.count > 0

    from headrace.streams import compacted

    recs = [Record(r.topic, r.partition, r.offset, b"s|v1|input", r.value, r.headers)
            for _, r in POISON]
    monkeypatch.setattr(compacted, "read_to_end", lambda *a, **k: iter(recs))
    ctx: Any = type("Ctx", (), {"conn": object(), "settings": _settings(),
                                "scorer": type("S", (), {"stream": "s"})()})()
    assert drift_tap.read_states(ctx, "input") == {}


def _settings() -> Any:
    from headrace.core.settings import load_settings

    return load_settings()


# --- operators' tools: dashboard, dead letters, rollout, lineage, evidence, replay -------------


def test_dashboard_boards_count_poison_and_apply_the_next_event() -> None:
    from headrace.ops.dashboard.drift import DriftBoard
    from headrace.ops.dashboard.state import JobBoard

    jobs, drift = JobBoard(), DriftBoard()
    for _, rec in POISON:
        jobs.apply(rec)
        drift.apply(rec)
    assert jobs.bad_events > 0 and drift.bad_records > 0
    ev = JobEvent(job_id="j1", kind=JobEventKind.QUEUED)
    jobs.apply(good(ev.to_bytes()))
    assert "j1" in jobs.jobs
    d = DriftDetected(stream="s", model_name="m", model_version=1, feature="f",
                      statistic="psi", value=0.5, threshold=0.1, drifting=True, window=1,
                      consecutive=1, rows=10, scorer="x")
    drift.apply(good(d.to_bytes()))
    assert drift.records == 1


def test_dead_letter_tools_show_and_group_any_letter() -> None:
    from headrace.ops.deadletters import Letter, summarize

    letters = [Letter(rec) for _, rec in POISON]
    for lt in letters:
        json.dumps(lt.to_json())  # "²" as an offset header raised ValueError before
        assert lt.source[1:] in ((None, None),) or all(isinstance(x, int) for x in lt.source[1:])
        assert lt.fingerprint
    assert sum(g.count for g in summarize(letters)) == len(letters)


def test_header_scans_of_redrive_and_replay_survive_any_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.ops import replaying
    from headrace.ops.replay_checkpoints import ReplayCheckpoint
    from headrace.streams import reading

    class Msg:
        def __init__(self, rec: Record) -> None:
            self.rec = rec

        def headers(self) -> list[tuple[str, bytes]]:
            return list(self.rec.headers)

        def partition(self) -> int:
            return 0

    arabic_15 = "\u0661\u0665".encode()  # int() reads it: 15
    offsets = [b"\xff\xfe", "\u00b2".encode(), b"12", b"", b"-1", arabic_15]  # \u00b2: "²"
    msgs = [Msg(Record(TOPIC, 0, i, None, None, (("replay-id", b"r"), ("replay-origin-offset", v))))
            for i, v in enumerate(offsets)]

    class Reader:
        done = False

        def __init__(self, *a: Any, **k: Any) -> None:
            pass

        def __enter__(self) -> Reader:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def poll(self, n: int, t: float) -> list[Msg]:
            Reader.done = True
            return msgs

    monkeypatch.setattr(reading, "RangeReader", Reader)
    monkeypatch.setattr(reading, "probe_ends", lambda *a, **k: {0: (0, 100)})
    found = reading.scan_headers(None, TOPIC, {0: 0}, match={"replay-id": "r"},  # type: ignore
                                 collect="replay-origin-offset")
    assert len(found[0]) == len(msgs)  # a non-UTF-8 header raised UnicodeDecodeError before
    monkeypatch.setattr(replaying, "scan_headers", lambda *a, **k: found)
    cp = ReplayCheckpoint.model_validate({
        "replay_id": "r", "source": "a", "target": "b", "mode": "copy",
        "partitions": [{"partition": 0, "start": 0, "end": 100, "next": 0, "scan_from": 0}]})
    assert replaying.reconcile(None, cp) == 16  # type: ignore[arg-type]  # "²" raised before


def test_rollout_evidence_lineage_and_events_readers_skip_poison(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.ops import lineage
    from headrace.ops.rollout import control as rollout_control
    from headrace.ops.rollout import live_evidence
    from headrace.streams import compacted, reading

    recs = [r for _, r in POISON]
    keyed = [Record(r.topic, r.partition, r.offset, b"s", r.value, r.headers) for r in recs]
    monkeypatch.setattr(compacted, "read_to_end", lambda *a, **k: iter(keyed))
    assert rollout_control.current_rollout(None, "s") is None  # type: ignore[arg-type]

    lc = _counts()
    monkeypatch.setattr(compacted, "read_to_end",
                        lambda *a, **k: iter([*recs, good(lc.to_bytes(), key=lc.key())]))
    assert list(live_evidence.latest_counts(None, TOPIC)) == [  # type: ignore[arg-type]
        ("s", "m", 1, 2)]

    monkeypatch.setattr(reading, "iter_records", lambda *a, **k: iter(recs))
    assert reading.read_events(None, TOPIC, JobEvent) == []  # type: ignore[arg-type]

    for rec in recs:
        lineage._value(rec)  # RecursionError before, on [ x 100,000
        with pytest.raises(PermanentError):
            lineage._prediction_of(rec)


def test_follow_job_skips_poison_and_non_utf8_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.trainers import api

    done = JobEvent(job_id="j1", kind=JobEventKind.SUCCEEDED)
    recs = [r for _, r in POISON] + [good(done.to_bytes(), key=b"j1")]
    monkeypatch.setattr(api, "iter_records", lambda *a, **k: iter(recs))
    got = list(api.follow_job(conn=None, job_id="j1"))  # type: ignore[arg-type]
    assert [e.kind for e in got] == [JobEventKind.SUCCEEDED]  # b"\xff\xfe" key raised before


# --- the control plane's agents ---------------------------------------------------------------


def test_control_plane_hooks_raise_only_what_the_agents_handle(tmp_path: Path) -> None:
    from headrace.trainers.control import ControlPlane
    from headrace.trainers.executors.local import LocalExecutor

    plane = ControlPlane(root=tmp_path, conn=None, executor=LocalExecutor(root=tmp_path))  # type: ignore[arg-type]
    refused = 0
    for _, rec in POISON:
        assert plane.on_drift(rec, {}) == []
        try:
            plane.on_request(rec, {})
        except PermanentError as exc:  # the agent dead-letters it, with this reason
            refused += 1
            assert exc.stage == "parse" and len(str(exc)) < 2_000
    assert refused == len(POISON) and plane._bad_drift.count > 0


def test_the_control_apps_records_carry_any_message_to_the_hooks() -> None:
    from headrace.trainers.control.record_handling import record_of as _record

    for _, rec in POISON:
        msg = type("Msg", (), {"topic": rec.topic, "partition": 0, "offset": rec.offset,
                               "key": rec.key, "value": rec.value, "timestamp": None,
                               "headers": [*rec.headers, ("none", None)]})()
        ref = _record(msg)
        assert ref.value == rec.value and ref.headers[-1] == ("none", b"")
