"""At 80 columns: `jobs list` shows whole job ids, help lists every command's whole sentence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.cli import main, trainers_cmd
from headrace.trainers import jobs
from tests.trainers.conftest import request


def test_jobs_list_at_80_columns_shows_whole_job_ids_and_folds_the_reason(
        dfs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainers_cmd.console, "width", 80)
    ids = []
    for i in range(3):
        jid, _ = jobs.create_request(dfs, request("datasets/demo.parquet",
                                                  name=f"a-rather-long-model-name-{i}"))
        jobs.update_status(dfs, jid, reason="dataset 'datasets/demo.parquet' does not exist "
                           "under the DFS root; make it with headrace datasets make-demo")
        ids.append(jid)
    assert main(["--dfs-root", str(dfs), "jobs", "list"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    for jid in ids:
        assert jid in out, out
    assert "make-demo" in out.replace("\n", "")


@pytest.mark.parametrize("group", [[], ["jobs"], ["models"], ["dlq"], ["datasets"]])
def test_help_at_80_columns_cuts_no_command_description(group: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", "import sys; from headrace.cli import main; "
                           "sys.exit(main())", *group, "--help"], capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not [ln for ln in lines if ln.rstrip().endswith("...") and "Usage" not in ln], lines
    assert all(len(ln) <= 80 for ln in lines), proc.stdout
