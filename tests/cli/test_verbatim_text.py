"""The CLI prints user text verbatim: a reason, a column name or a label holding brackets is
never taken as rich markup (it once printed ``expected shape [batch, 48, 48, 3], got`` as
``expected shape , got``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import JobState, ModelSpec, TrainRequested
from headrace.trainers import jobs

REASON = "expected shape [batch, 48, 48, 3], got [bold](7, 3)[/bold] [red]x"


def _failed_job(dfs: Path) -> str:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="m",
                         framework="tensorflow", dataset_uri="datasets/d.parquet",
                         spec=ModelSpec())
    jid, _ = jobs.create_request(dfs, req)
    jobs.update_status(dfs, jid, state=JobState.FAILED, reason=REASON)
    return jid


def test_jobs_list_and_show_print_a_reason_with_brackets_verbatim(
        dfs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.cli import trainers_cmd

    # One line per row, so the reason is not folded (the console's width is set at import).
    monkeypatch.setattr(trainers_cmd.console, "width", 400)
    jid = _failed_job(dfs)
    assert main(["--dfs-root", str(dfs), "jobs", "show", jid]) == 1  # a failed job
    assert REASON in capsys.readouterr().out
    assert main(["--dfs-root", str(dfs), "jobs", "list"]) == 0
    assert REASON in capsys.readouterr().out


def test_a_dataset_whose_columns_and_labels_hold_brackets_prints_them(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.cli import datasets_cmd

    monkeypatch.setattr(datasets_cmd.console, "width", 200)
    path = tmp_path / "d.jsonl"
    path.write_text("".join(f'{{"[b]size": {i}, "label": "[red]{i % 2}"}}\n' for i in range(20)))
    assert main(["--dfs-root", str(dfs), "datasets", "put", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[b]size" in out and "[red]0" in out and "[red]1" in out
