"""The ops commands as an operator runs them: one-line refusals, non-zero exits, nothing
written; dry runs; a second redrive refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.core.errors import RecordRef, ValidationFailed
from headrace.core.settings import Settings
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import write_dead_letter
from headrace.streams.topics import catalog, data_topic, dlq_topic
from tests.fixtures import read_all
from tests.ops.conftest import Written


def run(conn: KafkaConnection, dfs: Path, *args: str) -> int:
    return main(["--bootstrap", conn.bootstrap, "--dfs-root", str(dfs), *args])


@pytest.mark.parametrize(("args", "message"), [
    (["--from", "2999-01-01T00:00Z"], "is in the future"),
    (["--partition", "0", "--from-offset", "0", "--to-offset", "500"], "outside the topic"),
    (["--into", "SIDE", "--model", "nosuchmodel:3"], "model nosuchmodel has no version 3"),
    (["--resume", "replay-nope"], "no replay replay-nope"),
    (["--into", "SIDE", "--runtime", "onnxruntime"], "--runtime is for a re-score"),
])
def test_bad_replay_exits_non_zero_with_one_line_and_writes_nothing(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]], capsys: pytest.CaptureFixture[str],
    args: list[str], message: str,
) -> None:
    src, side = topic_factory(partitions=1), topic_factory(partitions=1)
    writer(src, per_partition=20)
    rc = run(conn, dfs, "replay", src, *[side if a == "SIDE" else a for a in args])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert len(read_all(conn, src)) == 20 and read_all(conn, side) == []
    assert not (dfs / "ops").exists()


def test_replay_without_into_refuses_to_append_a_topic_onto_itself(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]], capsys: pytest.CaptureFixture[str],
) -> None:
    src = topic_factory(partitions=1)
    writer(src, per_partition=5)
    assert run(conn, dfs, "replay", src, "--no-progress") == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"headrace: invalid: replay needs a target: --into TOPIC (a side topic), or "
                   f"--into {src} to append the range onto {src} itself")
    assert len(read_all(conn, src)) == 5 and not (dfs / "ops").exists()
    assert run(conn, dfs, "replay", src, "--dry-run") == 0  # a look needs no target
    assert "a real run needs --into" in capsys.readouterr().out
    assert run(conn, dfs, "replay", src, "--into", src, "--no-progress") == 0  # on purpose
    assert len(read_all(conn, src)) == 10


def test_replay_of_an_unknown_topic_exits_non_zero(conn: KafkaConnection, dfs: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert run(conn, dfs, "replay", "no-such-topic-cli") != 0
    assert "topic no-such-topic-cli does not exist" in capsys.readouterr().err


def test_replay_dry_run_prints_each_partition_then_a_real_run_copies(
    conn: KafkaConnection, dfs: Path, topic_factory: Callable[..., str],
    writer: Callable[..., list[Written]], capsys: pytest.CaptureFixture[str],
) -> None:
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    writer(src, per_partition=10, partitions=2)
    assert run(conn, dfs, "replay", src, "--into", dst, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "partition 0: offsets [0, 10) -> 10 records" in out and "nothing written" in out
    assert read_all(conn, dst) == []
    assert run(conn, dfs, "replay", src, "--into", dst, "--no-progress") == 0
    assert "20 records in" in capsys.readouterr().out
    assert len(read_all(conn, dst)) == 20


def test_dlq_redrive_twice_is_refused_the_second_time(
    conn: KafkaConnection, dfs: Path, settings: Settings, capsys: pytest.CaptureFixture[str],
) -> None:
    ensure_topics(conn, catalog(settings))
    stream = settings.streams[0]
    p = make_producer(conn)
    write_dead_letter(p, dlq_topic(stream), DeadLetter.from_error(
        RecordRef(data_topic(stream), 0, 3, value=b"{oops"), ValidationFailed("bad"),
        stage="decode"))
    p.flush(10)
    assert run(conn, dfs, "dlq", "list", stream) == 0
    assert "ValidationFailed" in capsys.readouterr().out
    assert run(conn, dfs, "dlq", "redrive", stream, "--offset", "0") == 0
    capsys.readouterr()
    assert run(conn, dfs, "dlq", "redrive", stream, "--offset", "0") != 0
    err = capsys.readouterr().err.strip()
    assert "already redriven" in err and len(err.splitlines()) == 1
    assert [r.value for r in read_all(conn, data_topic(stream))] == [b"{oops"]
