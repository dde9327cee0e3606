"""Replay: exact ranges by offset and by time, resumable without duplicates, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.core.errors import ValidationFailed
from headrace.ops import replay_checkpoints as checkpoints
from headrace.ops import replaying
from headrace.ops.provenance import REPLAY_ID, REPLAY_ORIGIN_OFFSET
from headrace.ops.ranges import format_ms
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import Record
from tests.fixtures import eventually, read_all
from tests.ops.conftest import Written


def origin(rec: Record) -> tuple[int, int]:
    """(partition, offset) of the source record a copy came from."""
    return rec.partition, int(rec.header(REPLAY_ORIGIN_OFFSET) or -1)


def test_replay_by_offsets_copies_exactly_the_range_keeping_key_headers_partition(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    written = writer(src, per_partition=50, partitions=2)
    cp = replaying.plan(conn, source=src, into=dst, partitions=[0, 1],
                        from_offsets=[10, 0], to_offsets=[20, 5])
    result = replaying.run(conn, dfs, cp)

    got = read_all(conn, dst)
    want = [w for w in written if (w.partition == 0 and 10 <= w.offset < 20)
            or (w.partition == 1 and w.offset < 5)]
    assert result.completed and result.records_in == 15
    assert sorted(origin(r) for r in got) == [(w.partition, w.offset) for w in want]
    by_origin = {origin(r): r for r in got}
    for w in want:
        r = by_origin[(w.partition, w.offset)]
        assert (r.partition, r.key, r.value) == (w.partition, w.key, w.value)
        assert r.header("n") == str(w.offset) and r.header(REPLAY_ID) == cp.replay_id
    saved = json.loads(checkpoints.checkpoint_path(dfs, cp.replay_id).read_text())
    assert saved["status"] == "completed" and saved["records_out"] == 15


def test_replay_by_timestamp_moves_exactly_the_records_in_the_time_range(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src, dst = topic_factory(partitions=3), topic_factory(partitions=3)
    base = int(time.time() * 1000) - 600_000
    written = writer(src, per_partition=200, partitions=3, base_ms=base, step_ms=100)
    lo, hi = base + 5_050, base + 12_000  # [record 51, record 120) in every partition
    cp = replaying.plan(conn, source=src, into=dst, from_time=format_ms(lo), to_time=format_ms(hi))
    assert [(p.start, p.end) for p in cp.partitions] == [(51, 120)] * 3
    replaying.run(conn, dfs, cp)

    got = read_all(conn, dst)
    want = sorted((w.partition, w.offset) for w in written if lo <= w.timestamp_ms < hi)
    assert len(want) == 3 * 69
    assert sorted(origin(r) for r in got) == want


def test_replay_into_its_own_topic_stops_at_the_end_captured_before_producing(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src = topic_factory(partitions=1)
    writer(src, per_partition=300)
    result = replaying.run(conn, dfs, replaying.plan(conn, source=src))
    assert result.records_in == 300
    got = read_all(conn, src)
    assert len(got) == 600
    assert sorted(origin(r) for r in got[300:]) == [(0, o) for o in range(300)]


def test_stopped_replay_resumes_from_its_checkpoint_without_duplicates(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    writer(src, per_partition=400, partitions=2)
    cp = replaying.plan(conn, source=src, into=dst)
    first = replaying.run(conn, dfs, cp, stop_after=250, batch=100)
    assert not first.completed and first.records_in == 250
    assert len(read_all(conn, dst)) == 250

    again = replaying.resume(conn, dfs, cp.replay_id, source=src)
    second = replaying.run(conn, dfs, again)
    assert second.completed and second.records_in == 550
    counts = Counter(origin(r) for r in read_all(conn, dst))
    assert len(counts) == 800 and set(counts.values()) == {1}


def test_resume_skips_records_acknowledged_after_the_last_checkpoint(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    """A crash between flush and checkpoint: the target holds records the checkpoint does not
    know about; the resume finds them by their replay id and does not write them again."""
    src, dst = topic_factory(partitions=1), topic_factory(partitions=1)
    writer(src, per_partition=300)
    cp = replaying.plan(conn, source=src, into=dst)
    stale = cp.model_copy(deep=True)
    replaying.run(conn, dfs, cp, stop_after=120, batch=40)
    checkpoints.save(dfs, stale.model_copy(update={"status": "running"}))  # progress "lost"

    result = replaying.run(conn, dfs, replaying.resume(conn, dfs, cp.replay_id))
    assert result.skipped_on_resume == 120 and result.records_in == 180
    counts = Counter(origin(r) for r in read_all(conn, dst))
    assert len(counts) == 300 and set(counts.values()) == {1}


_KILLABLE = """
import sys
from pathlib import Path
from headrace.ops import replaying
from headrace.streams.clients import KafkaConnection
conn = KafkaConnection(bootstrap=sys.argv[1])
cp = replaying.plan(conn, source=sys.argv[2], into=sys.argv[3], rate=400, replay_id=sys.argv[5])
replaying.run(conn, Path(sys.argv[4]), cp, checkpoint_every_s=0.2)
"""


@pytest.mark.slow
def test_killed_replay_resumes_without_duplicating(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    writer(src, per_partition=1000, partitions=2)
    rid = "replay-killed-test"
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE, conn.bootstrap, src, dst, str(dfs),
                             rid], cwd=Path(__file__).parents[2])
    path = checkpoints.checkpoint_path(dfs, rid)
    def progressed() -> bool:
        assert proc.poll() is None, "the replay ended before it could be killed"
        return path.exists() and checkpoints.load(dfs, rid).records_out > 300

    eventually(progressed, timeout_s=60, what="a checkpoint past 300 records")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = checkpoints.load(dfs, rid)
    assert before.status == "running" and 300 < before.records_out < 2000

    result = replaying.run(conn, dfs, replaying.resume(conn, dfs, rid))
    assert result.completed
    counts = Counter(origin(r) for r in read_all(conn, dst))
    assert len(counts) == 2000 and set(counts.values()) == {1}


def test_dry_run_describes_each_partition_and_writes_nothing(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    writer(src, per_partition=30, partitions=2)
    cp = replaying.plan(conn, source=src, into=dst, from_offsets=[5], to_offsets=[25])
    lines = replaying.describe(cp)
    assert "partition 0: offsets [5, 25) -> 20 records" in lines[1]
    assert "partition 1: offsets [5, 25) -> 20 records" in lines[2]
    assert lines[-1].strip() == "total: 40 records"
    assert read_all(conn, dst) == [] and not (dfs / "ops").exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"from_offsets": [0], "to_offsets": [999]}, "outside the topic"),
    ({"partitions": [5]}, "has no partition 5"),
    ({"from_time": "2999-01-01T00:00Z"}, "in the future"),
    ({"from_time": "2001-01-01T00:00Z", "to_time": "2001-01-02T00:00Z"}, "outside"),
    ({"from_time": "yesterday"}, "not an ISO-8601 time"),
    ({"rate": 0}, "--rate must be > 0"),
    ({"into": "no-such-topic-xyz"}, "does not exist"),
    ({"model": "m:1"}, "side topic"),
])
def test_bad_replay_input_is_refused_with_one_line_and_nothing_written(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]], kwargs: dict[str, object], message: str,
) -> None:
    src = topic_factory(partitions=1)
    writer(src, per_partition=20)
    with pytest.raises(ValidationFailed) as err:
        replaying.plan(conn, source=src, **kwargs)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)
    assert len(read_all(conn, src)) == 20


def test_unknown_source_topic_is_refused(conn: KafkaConnection) -> None:
    with pytest.raises(ValidationFailed, match="topic no-such-source does not exist"):
        replaying.plan(conn, source="no-such-source")


def test_rate_limit_paces_the_replay(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]],
) -> None:
    src, dst = topic_factory(partitions=1), topic_factory(partitions=1)
    writer(src, per_partition=100)
    result = replaying.run(conn, dfs, replaying.plan(conn, source=src, into=dst, rate=100))
    assert result.records_in == 100 and result.elapsed_s >= 0.9
