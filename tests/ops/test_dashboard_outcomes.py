"""The gate's outcome (promoted / kept / refused) from both status formats, in `jobs list`
and for the dashboard; training curves read defensively from history.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main, trainers_cmd
from headrace.ops.dashboard.history import MAX_SERIES, curves, read_history
from headrace.store.outcomes import Outcome, Result, Via, job_outcome, version_outcome
from headrace.store.versions import AliasPointer
from tests.ops.dashboard_data import HISTORY, KEPT_WHY, LEGACY_WHY, REFUSED_WHY, job, write_dfs

OK = {"state": "succeeded"}


@pytest.mark.parametrize(("status", "gate", "expected"), [
    ({"state": "running"}, None, None),
    ({"state": "failed", "reason": "boom"}, None, None),
    (OK, None, None),  # an old job that recorded nothing about the gate: unknown
    ({**OK, "promoted": True, "gate_reasons": []}, None, Outcome(Result.PROMOTED)),
    ({**OK, "promoted": False, "gate_reasons": [KEPT_WHY]}, {"passed": True},
     Outcome(Result.KEPT, KEPT_WHY)),
    ({**OK, "promoted": False}, {"passed": True, "promote": False},
     Outcome(Result.KEPT, "promotion off")),
    ({**OK, "promoted": False, "gate_reasons": LEGACY_WHY},
     {"passed": False, "reasons": LEGACY_WHY, "held_by": ["baseline"]},
     Outcome(Result.REFUSED, LEGACY_WHY[0], ("baseline",))),
    ({**OK, "result": "refused", "reason": "; ".join(REFUSED_WHY), "held_by": ["min"]}, None,
     Outcome(Result.REFUSED, "; ".join(REFUSED_WHY), ("min",))),
    ({**OK, "result": "kept", "reason": None, "gate_reasons": ["x below y"]}, None,
     Outcome(Result.KEPT, "x below y")),
    ({**OK, "result": "promoted", "reason": "stale"}, None, Outcome(Result.PROMOTED)),
    ({**OK, "result": "exploded"}, None, None),  # not a result: unknown, not guessed
])
def test_a_jobs_outcome_is_read_from_either_status_format_and_never_guessed(
        status: dict[str, Any], gate: dict[str, Any] | None, expected: Outcome | None) -> None:
    assert job_outcome(status, gate) == expected


def test_a_versions_outcome_prefers_production_then_its_job_then_its_gate() -> None:
    refused = {"passed": False, "reasons": ["a", "b"], "held_by": ["min"]}
    was = [AliasPointer(1, "x", None, "t", "job j")]
    assert version_outcome(gate=refused, version=1, history=was) == Outcome(
        Result.PROMOTED, via=Via.JOB)
    assert version_outcome(gate=refused, version=2, history=was) == Outcome(
        Result.REFUSED, "a; b", ("min",))
    assert version_outcome(gate={"passed": True, "promote": False}) \
        == Outcome(Result.KEPT, "promotion off")
    assert version_outcome(gate=None) is None
    held = {**OK, "result": "kept", "reason": KEPT_WHY}
    assert version_outcome(gate={"passed": True}, job_status=held) \
        == Outcome(Result.KEPT, KEPT_WHY)
    assert Outcome(Result.REFUSED, "a; b").line() == "refused: a; b"
    assert Outcome(Result.PROMOTED).line() == "promoted"


def test_jobs_list_gives_the_gates_outcome_where_the_reason_was_empty(
        dfs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainers_cmd.console, "width", 240)
    write_dfs(dfs, "iris")
    job(dfs, "job-failed", model_name="iris", state="failed",
        reason="dataset 'datasets/x.parquet' does not exist\nsecond line")
    job(dfs, "job-old", model_name="iris")  # succeeded before the gate was recorded
    assert main(["--dfs-root", str(dfs), "jobs", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["job-kept"].rstrip().endswith("kept: " + KEPT_WHY[:160 - len("kept: ")])
    assert rows["job-refused"].rstrip().endswith("refused: " + "; ".join(REFUSED_WHY))
    # The older format: the version's manifest says the gate refused it.
    assert rows["job-legacy"].rstrip().endswith("refused: " + LEGACY_WHY[0])
    assert rows["job-unstored"].rstrip().endswith("refused: accuracy 0.3000 < min 0.9000")
    assert rows["job-failed"].rstrip().endswith("does not exist")
    assert rows["job-old"].rstrip().endswith("11-24 20:00")  # no reason: nothing guessed


def test_history_becomes_plot_series_with_gaps_for_missing_values(tmp_path: Path) -> None:
    (tmp_path / "history.json").write_text(json.dumps(HISTORY))
    h = read_history(tmp_path)
    assert h is not None and h["epochs"] == [1, 2, 3, 4, 5]
    assert set(h["series"]) == {"loss", "val_loss", "accuracy", "val_accuracy",
                                "learning_rate"}
    assert h["series"]["accuracy"] == [0.41, None, 0.74, 0.79, 0.83]
    assert (h["epochs_run"], h["best_epoch"], h["stopped_because"]) == (5, 3, "early_stopping")
    # A regressor: whatever metrics it logs; a key first seen late is padded before.
    reg = curves({"epochs": [{"epoch": 1, "loss": 3.0}, {"epoch": 2, "loss": 2.0,
                                                         "val_rmse": 1.5}]})
    assert reg is not None and reg["series"] == {"loss": [3.0, 2.0], "val_rmse": [None, 1.5]}
    assert reg["best_epoch"] is None and reg["stopped_because"] is None


@pytest.mark.parametrize("raw", [
    None, [], {"epochs": "many"}, {"epochs": []}, {"epochs": [1, "x", None]},
])
def test_a_history_without_epochs_is_no_history(raw: Any) -> None:
    assert curves(raw) is None


def test_a_malformed_history_shows_as_gaps_or_an_error_never_a_crash(tmp_path: Path) -> None:
    odd = curves({"epochs": [{"epoch": math.nan, "loss": math.inf, "ok": True, "n": "7"},
                             {"loss": 1.0}], "best_epoch": "3", "epochs_run": math.nan,
                  "stopped_because": ["max_epochs"]})
    assert odd is not None and odd["epochs"] == [1, 2]  # a bad epoch number: its position
    assert odd["series"] == {"loss": [None, 1.0]}  # no bools, no strings, inf as a gap
    assert odd["best_epoch"] is None and odd["epochs_run"] is None
    assert odd["stopped_because"] is None
    wide = curves({"epochs": [{f"m{i}": 1.0 for i in range(100)}]})
    assert wide is not None and len(wide["series"]) == MAX_SERIES
    assert read_history(tmp_path) is None  # no file: an older job
    (tmp_path / "history.json").write_text('{"epochs": [')
    assert read_history(tmp_path) == {"error": "history.json unreadable: JSONDecodeError"}
    json.dumps(odd, allow_nan=False)  # what the API sends is strict JSON
