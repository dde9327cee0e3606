"""Issue 34: one version, every view, the same words. A version the gate refused and a live
gate later made production read "refused" then "promoted (live gate)" then "rolled back" alike
in `jobs list`/`show`, `models list`/`show`, `train --wait`'s last line, the dashboard's JSON
and the job's SUCCEEDED event (headrace/store/outcomes.py computes them all)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.cli import main, models_cmd, trainers_cmd
from headrace.contracts import JobEvent, JobEventKind
from headrace.core.settings import load_settings
from headrace.ops.dashboard import Dashboard
from headrace.ops.dashboard.state import JobBoard
from headrace.store import versions
from headrace.store.outcomes import Outcome, Result, Via
from headrace.streams.reading import Record
from headrace.trainers.api import build_request
from tests.ops.dashboard_data import REFUSED_WHY, job, publish
from tests.ops.http_json import get_ok

WHY = "; ".join(REFUSED_WHY)
PASSED = {"passed": True, "reasons": [], "promote": True, "held_by": []}


@pytest.fixture
def dfs(tmp_path: Path) -> Path:
    """iris:1 production by its job; iris:2 refused by the gate (job-b)."""
    v1 = publish(tmp_path, "iris", accuracy=0.8, job_id="job-a", gate=PASSED)
    versions.set_alias(tmp_path, "iris", v1, reason="job job-a")
    job(tmp_path, "job-a", model_name="iris", version=1, result="promoted", promoted=True)
    publish(tmp_path, "iris", accuracy=0.41, job_id="job-b",
            gate={"passed": False, "reasons": REFUSED_WHY, "held_by": ["min"]})
    d = job(tmp_path, "job-b", model_name="iris", version=2, result="refused", promoted=False,
            reason=WHY, gate_reasons=REFUSED_WHY, held_by=["min"])
    req = build_request(model_name="iris", framework="tensorflow",
                        dataset_uri="datasets/iris.parquet", idempotency_key="b")
    (d / "request.json").write_bytes(req.to_bytes())
    return tmp_path


@pytest.fixture
def dash(dfs: Path) -> Iterator[Dashboard]:
    d = Dashboard(settings=load_settings(dfs_root=dfs), conn=None)
    d.start()
    yield d
    d.stop()


def _views(dfs: Path, dash: Dashboard, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What each view says of job-b / iris:2."""
    out: dict[str, str] = {}
    assert main(["--dfs-root", str(dfs), "jobs", "list"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("job-b"))
    out["jobs list"] = re.split(r"\d\d-\d\d \d\d:\d\d ", row, maxsplit=1)[1].strip()
    assert main(["--dfs-root", str(dfs), "models", "list"]) == 0
    table = capsys.readouterr().out
    out["models list"] = re.search(r"│ 2: (.*?)\s*│", table).group(1)  # type: ignore[union-attr]
    assert main(["--dfs-root", str(dfs), "jobs", "show", "job-b"]) == 0
    out["jobs show"] = re.search(r"│ outcome\s*│ (.*?)\s*│",  # type: ignore[union-attr]
                                 capsys.readouterr().out).group(1)
    assert main(["--dfs-root", str(dfs), "models", "show", "iris:2"]) == 0
    out["models show"] = next(ln for ln in capsys.readouterr().out.splitlines()
                              if ln.startswith("outcome: ")).removeprefix("outcome: ")
    done = JobEvent(job_id="job-b", kind=JobEventKind.SUCCEEDED, model_name="iris",
                    message="iris:2 " + Outcome(Result.REFUSED, WHY).line())
    out["train --wait"] = trainers_cmd._final_line(dfs, "job-b", done).removeprefix("iris:2 ")
    jobs = {j["job_id"]: j for j in get_ok(dash.url + "api/jobs")["jobs"]}
    out["dashboard jobs"] = jobs["job-b"]["outcome"]["line"]
    out["dashboard job"] = get_ok(dash.url + "api/jobs/job-b?logs=0")["outcome"]["line"]
    [iris] = get_ok(dash.url + "api/models")["models"]
    out["dashboard models"] = next(v for v in iris["versions"]
                                   if v["version"] == 2)["outcome"]["line"]
    out["dashboard version"] = get_ok(dash.url + "api/models/iris/2")["outcome"]["line"]
    return out


def test_every_view_says_the_same_through_refusal_live_promotion_and_rollback(
        dfs: Path, dash: Dashboard, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainers_cmd.console, "width", 400)
    monkeypatch.setattr(models_cmd.console, "width", 400)
    refused = f"refused: {WHY}"
    assert set(_views(dfs, dash, capsys).values()) == {refused}

    # A live gate makes it production (live_evidence.promote_if_live_gate's reason).
    versions.set_alias(dfs, "iris", 2, reason="live gate on s: accuracy held")
    promoted = f"promoted (live gate): the gate had refused it: {WHY}"
    said = _views(dfs, dash, capsys)
    assert set(said.values()) == {promoted}, said

    versions.set_alias(dfs, "iris", 1, reason="rollback from v2")  # promotion.rollback's
    said = _views(dfs, dash, capsys)
    assert set(said.values()) == {"rolled back: production rolled back to v1"}, said
    # ... and the version rolled back to is production again, by the rollback.
    [iris] = get_ok(dash.url + "api/models")["models"]
    assert iris["versions"][0]["outcome"]["line"] == "promoted (rollback)"


def test_the_events_reason_is_the_same_line_and_the_dashboard_reads_it_back() -> None:
    board = JobBoard()
    for i, said in enumerate([Outcome(Result.REFUSED, WHY), Outcome(Result.KEPT, "promotion off"),
                              Outcome(Result.PROMOTED)]):
        ev = JobEvent(job_id=f"j{i}", kind=JobEventKind.SUCCEEDED, model_name="iris",
                      message=f"iris:{i} {said.line()}",
                      reason=None if said.result == Result.PROMOTED else said.line())
        board.apply(Record("events.jobs", 0, i, value=ev.to_bytes()))
        assert board.get(f"j{i}", logs=0)["outcome"] == said.to_json()  # type: ignore[index]
    assert Outcome.from_line("promoted (live gate): x") == Outcome(Result.PROMOTED, "x",
                                                                  via=Via.LIVE_GATE)
    assert Outcome.from_line("a, b below min").result == Result.KEPT  # the older reason
