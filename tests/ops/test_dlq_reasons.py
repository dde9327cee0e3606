"""`dlq list` groups letters by reason with counts; `dlq redrive --dry-run` says which letters
would fail again with the production model before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.core.errors import RecordRef, ValidationFailed
from headrace.core.settings import Settings
from headrace.store.manifest import Manifest
from headrace.store.versions import publish, set_alias
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import write_dead_letter
from headrace.streams.topics import catalog, data_topic, dlq_topic
from tests.fixtures import read_all


def _run(conn: KafkaConnection, dfs: Path, *args: str) -> int:
    return main(["--bootstrap", conn.bootstrap, "--dfs-root", str(dfs), *args])


@pytest.fixture
def stream(conn: KafkaConnection, settings: Settings, dfs: Path) -> str:
    ensure_topics(conn, catalog(settings))
    name = settings.streams[0]
    p = make_producer(conn)
    for offset, value, why in [
        (3, b'{"f0": 1, "f1": "oops"}', "feature 'f1' at offset 3 is not a number"),
        (7, b'{"f0": 2, "f1": "nope"}', "feature 'f1' at offset 7 is not a number"),
        (9, b'{"f0": 3, "f1": 4}', "feature 'f2' is missing, null or not finite"),
    ]:
        write_dead_letter(p, dlq_topic(name), DeadLetter.from_error(
            RecordRef(data_topic(name), 0, offset, value=value), ValidationFailed(why),
            stage="decode"))
    assert p.flush(10) == 0
    # The stream's production model now takes f0, f1 (redrive reads only its manifest).
    mv = publish(dfs, Manifest(name=name, framework="tensorflow", task="classifier",
                               features=("f0", "f1"), label="y", classes=("a", "b")),
                 lambda d: (d / "model.keras").write_bytes(b"placeholder"))
    set_alias(dfs, name, mv.version)
    return name


def test_dlq_list_groups_letters_by_reason_with_counts(
        conn: KafkaConnection, dfs: Path, stream: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(conn, dfs, "dlq", "list", stream, "--json") == 0
    groups = json.loads(capsys.readouterr().out)
    assert [(g["count"], g["sample_message"]) for g in groups] == [
        (2, "feature 'f1' at offset 3 is not a number"),
        (1, "feature 'f2' is missing, null or not finite")]


def test_redrive_dry_run_says_which_letters_would_fail_again_and_sends_nothing(
        conn: KafkaConnection, dfs: Path, stream: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(conn, dfs, "dlq", "redrive", stream, "--dry-run") == 0
    out = capsys.readouterr().out
    lines = [ln.strip() for ln in out.splitlines()]
    assert any(ln.startswith("0:0: would fail again with") for ln in lines), out
    assert any(ln.startswith("0:1: would fail again with") for ln in lines), out
    assert f"0:2: decodes now with {stream}:1" in lines, out
    assert "2 of 3 would fail again (fix the producer or the model first)" in lines, out
    assert read_all(conn, data_topic(stream)) == []
