"""Malicious inputs on every entry point are refused and touch nothing outside the DFS root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import TrainRequested, parse
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.store import dfs as dfs_paths
from headrace.store import versions

TRAVERSALS = ["../../etc", "..", "a/../../b", "/etc/passwd", "models/../../x", "x\x00y"]
SHELLY = ["a;rm -rf /", "$(touch pwned)", "`id`", "a|b", "a&&b", "name with space", "UPPER"]


def _snapshot(root: Path) -> set[str]:
    return {str(p) for p in root.parent.rglob("*")}


@pytest.mark.parametrize("name", TRAVERSALS + SHELLY)
def test_model_names_that_escape_or_smuggle_are_refused_everywhere(dfs: Path, name: str) -> None:
    before = _snapshot(dfs)
    with pytest.raises(ValidationFailed):
        dfs_paths.model_dir(dfs, name)
    with pytest.raises(PermanentError):
        versions.resolve(dfs, name)
    with pytest.raises(ValidationFailed):
        parse(TrainRequested, {"idempotency_key": "k", "model_name": name,
                               "framework": "tensorflow", "dataset_uri": "d.parquet"})
    assert _snapshot(dfs) == before
    assert not Path("pwned").exists()


@pytest.mark.parametrize("uri", ["../../etc/passwd", "/etc/passwd", "dfs:///etc/passwd",
                                 "dfs://../x", "a//b", "file:///etc/passwd", "a\\..\\b"])
def test_dataset_uris_outside_the_dfs_root_are_refused(dfs: Path, uri: str) -> None:
    with pytest.raises(ValidationFailed):
        parse(TrainRequested, {"idempotency_key": "k", "model_name": "m",
                               "framework": "tensorflow", "dataset_uri": uri})
    if "://" not in uri or uri.startswith("dfs://"):
        with pytest.raises(PermanentError):
            dfs_paths.resolve_dataset(dfs, uri)


def test_a_symlink_inside_the_dfs_cannot_lead_outside(dfs: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.parquet"
    outside.write_bytes(b"x")
    os.symlink(outside, dfs / "link.parquet")
    with pytest.raises(ValidationFailed, match="escapes"):
        dfs_paths.resolve_dataset(dfs, "link.parquet")


def test_oversized_events_are_refused_before_parsing() -> None:
    huge = json.dumps({"idempotency_key": "k", "model_name": "m", "framework": "tensorflow",
                       "dataset_uri": "d.parquet", "hyperparameters": {"x": "y" * 2_000_000}})
    with pytest.raises(ValidationFailed, match="exceeds the limit"):
        parse(TrainRequested, huge.encode())


@pytest.mark.parametrize("args", [
    ["send", "../../etc", "x.jsonl"],
    ["send", "$(id)", "x.jsonl"],
    ["tail", "data.demo", "--max", "-1"],
])
def test_cli_refuses_hostile_arguments_with_one_line(
    broker: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--bootstrap", broker, *args]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("headrace: ") and len(err.splitlines()) == 1
