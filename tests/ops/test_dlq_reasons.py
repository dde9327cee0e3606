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
    assert any(ln.startswith("0:0: would fail again (validate) with") for ln in lines), out
    assert any(ln.startswith("0:1: would fail again (validate) with") for ln in lines), out
    assert f"0:2: would pass decode and validate with {stream}:1" in lines, out
    assert ("2 of 3 would fail again, 1 would pass decode and validate, 0 not checked (fix the "
            "producer or the model first)") in lines, out
    assert read_all(conn, data_topic(stream)) == []


def test_dry_run_checks_decode_and_validate_for_any_signature_and_counts_apart(
        conn: KafkaConnection, settings: Settings, dfs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: with a model of more than numeric columns every letter read "not checked"
    and the summary "0 of 3 would fail again"; decode and validate need no model."""
    from headrace.store.signature import InputKind, ModelInput

    ensure_topics(conn, catalog(settings))
    name = settings.streams[0]
    p = make_producer(conn)
    for offset, value, stage in [(1, b"{not json", "decode"),
                                 (2, b'{"f0": 1, "f1": 2}', "validate"),  # no colour
                                 (3, b'{"f0": 1, "f1": 2, "colour": "red"}', "decode"),
                                 (4, b'{"f0": 1, "f1": 2, "colour": "red"}', "model")]:
        write_dead_letter(p, dlq_topic(name), DeadLetter.from_error(
            RecordRef(data_topic(name), 0, offset, value=value), ValidationFailed("was bad"),
            stage=stage))
    assert p.flush(10) == 0
    signature = (ModelInput(name="features", kind=InputKind.NUMERIC, columns=("f0", "f1"),
                            shape=(2,)),
                 ModelInput(name="colour", kind=InputKind.CATEGORY, dtype="string"))
    mv = publish(dfs, Manifest(name=name, framework="tensorflow", task="classifier",
                               features=("f0", "f1", "colour"), label="y", classes=("a", "b"),
                               inputs=signature),
                 lambda d: (d / "model.keras").write_bytes(b"never loaded"))
    set_alias(dfs, name, mv.version)
    assert _run(conn, dfs, "dlq", "redrive", name, "--dry-run") == 0
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines()]
    said = {ln.split(": ", 1)[0]: ln.split(": ", 1)[1] for ln in lines if ln[:4] in (
        "0:0:", "0:1:", "0:2:", "0:3:")}
    assert said["0:0"].startswith("would fail again (decode)"), lines
    assert said["0:1"].startswith("would fail again (validate)") and "colour" in said["0:1"]
    assert said["0:2"] == f"would pass decode and validate with {name}:1"
    assert said["0:3"].startswith("not checked: it failed at stage model")
    assert ("2 of 4 would fail again, 1 would pass decode and validate, 1 not checked "
            "(fix the producer or the model first)") in lines
    assert read_all(conn, data_topic(name)) == []
