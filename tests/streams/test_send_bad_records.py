"""`headrace send` with imperfect files: bad records named by line number, `--skip-bad` with a
side file, CSV columns typed by the stream's model, and typo'd streams refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.store.manifest import Manifest
from headrace.store.versions import publish, set_alias
from headrace.streams.clients import KafkaConnection, list_topics
from headrace.streams.tailing import tail


def _cli(broker: str, dfs: Path, *args: str) -> int:
    return main(["--bootstrap", broker, "--dfs-root", str(dfs), *args])


def _stream(broker: str, dfs: Path) -> str:
    stream = f"s{uuid.uuid4().hex[:8]}"
    assert _cli(broker, dfs, "topics", "--create", "--stream", stream) == 0
    return stream


def _sent(conn: KafkaConnection, stream: str, n: int) -> list[dict[str, object]]:
    return [m.value for m in tail(conn, f"data.{stream}", from_beginning=True, max_messages=n,
                                  idle_timeout_s=5)]


GOOD = [{"f0": float(i), "f1": i * 2.0} for i in range(5)]


def _jsonl(path: Path) -> Path:
    lines = [json.dumps(r) for r in GOOD]
    lines.insert(2, '{"f0": 9.0, "f1": ')          # truncated: line 3
    lines.insert(4, '{"f0": 1.0, "f1": {"x": 1}}')  # f1 an object: line 5
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_jsonl_lines_are_named_by_line_number_and_nothing_is_sent(
        broker: str, conn: KafkaConnection, dfs: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stream = _stream(broker, dfs)
    capsys.readouterr()
    assert _cli(broker, dfs, "send", stream, str(_jsonl(tmp_path / "r.jsonl"))) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("headrace: invalid: r.jsonl: 2 bad records (nothing sent;")
    assert err[1].startswith("  line 3: not JSON:")
    assert err[2] == "  line 5: field 'f1' is an object, expected a number"
    assert "Traceback" not in "\n".join(err)
    assert _sent(conn, stream, 1) == []


def test_skip_bad_sends_the_good_records_and_writes_the_bad_lines_to_a_side_file(
        broker: str, conn: KafkaConnection, dfs: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stream = _stream(broker, dfs)
    path = _jsonl(tmp_path / "r.jsonl")
    assert _cli(broker, dfs, "send", stream, str(path), "--skip-bad") == 0
    assert "skipped 2 bad records" in capsys.readouterr().err
    assert sorted(_sent(conn, stream, 5), key=lambda r: r["f0"]) == GOOD  # type: ignore[arg-type,return-value]
    side = tmp_path / "r.bad.jsonl"
    assert side.read_text().splitlines() == [path.read_text().splitlines()[2],
                                             path.read_text().splitlines()[4]]


def test_one_text_cell_in_a_csv_sets_aside_its_row_and_the_column_stays_numeric(
        broker: str, conn: KafkaConnection, dfs: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stream = _stream(broker, dfs)
    # The stream's production model takes f0, f1 as numbers (send reads only its manifest).
    mv = publish(dfs, Manifest(name=stream, framework="tensorflow", task="classifier",
                               features=("f0", "f1"), label="y", classes=("a", "b")),
                 lambda d: (d / "model.keras").write_bytes(b"placeholder"))
    set_alias(dfs, stream, mv.version)
    path = tmp_path / "r.csv"
    path.write_text("f0,f1\n1,2\n3,oops\n5,6\n")
    assert _cli(broker, dfs, "send", stream, str(path)) == 1
    err = capsys.readouterr().err
    assert "line 3: column 'f1': not a number (a text of 4 characters)" in err
    assert "oops" not in err  # a refused file's contents are never quoted
    assert _cli(broker, dfs, "send", stream, str(path), "--skip-bad") == 0
    assert sorted(_sent(conn, stream, 2), key=lambda r: r["f0"]) == [  # type: ignore[arg-type,return-value]
        {"f0": 1.0, "f1": 2.0}, {"f0": 5.0, "f1": 6.0}]
    assert (tmp_path / "r.bad.csv").read_text() == "f0,f1\n3,oops\n"


def test_an_unknown_stream_is_refused_until_it_is_created_on_purpose(
        broker: str, conn: KafkaConnection, dfs: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    typo = f"s{uuid.uuid4().hex[:8]}"
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD[0]) + "\n")
    assert _cli(broker, dfs, "send", typo, str(path)) == 1
    err = capsys.readouterr().err.strip()
    assert f"unknown stream {typo}: data.{typo} does not exist" in err
    assert f"headrace topics --create --stream {typo}" in err and len(err.splitlines()) == 1
    assert f"data.{typo}" not in list_topics(conn)
    assert _cli(broker, dfs, "topics", "--create", "--stream", typo) == 0
    assert {f"data.{typo}", f"predictions.{typo}", f"data.{typo}.dlq"} <= set(list_topics(conn))
    assert _cli(broker, dfs, "send", typo, str(path)) == 0
    assert _sent(conn, typo, 1) == [GOOD[0]]
