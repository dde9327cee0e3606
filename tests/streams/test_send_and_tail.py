from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.cli import main
from headrace.streams.clients import KafkaConnection
from headrace.streams.tailing import tail

RECORDS = [{"id": i, "x": i * 0.5, "label": f"c{i % 3}", "note": None if i % 2 else "n"}
           for i in range(25)]


def _cli(broker: str, *args: str) -> int:
    return main(["--bootstrap", broker, *args])


def _new_stream(broker: str) -> str:
    """A stream created on purpose, as a user does for one beyond HEADRACE_STREAMS."""
    stream = f"s{uuid.uuid4().hex[:8]}"
    assert _cli(broker, "topics", "--create", "--stream", stream) == 0
    return stream


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "parquet"])
def test_send_then_tail_moves_a_files_records_unchanged(
    broker: str, conn: KafkaConnection, tmp_path: Path, suffix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = _new_stream(broker)
    path = tmp_path / f"records.{suffix}"
    table = pa.Table.from_pylist(RECORDS)
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    elif suffix == "csv":
        path.write_text("id,x,label,note\n" + "".join(
            f"{r['id']},{r['x']},{r['label']},{r['note'] or ''}\n" for r in RECORDS))
    else:
        pq.write_table(table, path)
    assert _cli(broker, "send", stream, str(path), "--key", "id") == 0
    got = list(tail(conn, f"data.{stream}", from_beginning=True, max_messages=25,
                    idle_timeout_s=10))
    assert len(got) == 25
    by_id = {m.value["id"]: m for m in got}
    for r in RECORDS:
        m = by_id[r["id"]]
        assert m.value == r
        assert m.key == str(r["id"])
        assert m.headers["content-type"] == "application/json"

    capsys.readouterr()
    assert _cli(broker, "tail", f"data.{stream}", "--from-beginning", "--max", "3", "--json") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 3 and all(line["value"]["id"] in by_id for line in lines)


def test_send_arrow_batches_and_tail_decodes_rows(
    broker: str, conn: KafkaConnection, tmp_path: Path
) -> None:
    stream = _new_stream(broker)
    path = tmp_path / "r.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), path)
    assert _cli(broker, "send", stream, str(path), "--format", "arrow", "--batch-rows", "10") == 0
    got = list(tail(conn, f"data.{stream}", from_beginning=True, max_messages=3,
                    idle_timeout_s=10))
    rows = sorted((r for m in got for r in m.value), key=lambda r: r["id"])
    assert rows == RECORDS
    assert {m.headers["content-type"] for m in got} == {"application/vnd.apache.arrow.stream"}


@pytest.mark.parametrize("content, fragment", [
    ("", "holds no records"),
    ("null\n", "not valid jsonl"),  # crashed pyarrow's reader (segfault) before the check
])
def test_malformed_file_gives_one_line_error_and_sends_nothing(
    broker: str, conn: KafkaConnection, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    content: str, fragment: str,
) -> None:
    stream = f"s{uuid.uuid4().hex[:8]}"
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert _cli(broker, "send", stream, str(path)) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("headrace: ") and fragment in err and "\n" not in err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, fragment", [
    (["send", "demo", "x.txt"], "unknown file type"),
    (["send", "Bad/Name", "x.jsonl"], "invalid stream name"),
    (["send", "demo", "x.jsonl", "--format", "xml"], "json, arrow, raw or avro"),
    (["tail", "data.demo", "--max", "0"], "--max"),
    (["frobnicate"], "No such command"),
])
def test_bad_arguments_give_one_line_and_non_zero_exit(
    broker: str, args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _cli(broker, *args)
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert fragment in err and len(err.splitlines()) == 1, err


def test_unreachable_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--bootstrap", "127.0.0.1:1", "tail", "data.demo", "--max", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.startswith("headrace: unavailable: Kafka at 127.0.0.1:1")
    assert len(err.splitlines()) == 1


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("headrace 0.")
