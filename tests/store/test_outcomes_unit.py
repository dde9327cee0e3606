"""A version's outcome (promoted, kept, refused, rolled back, and by what) from its job status,
its gate and production's alias history, with no DFS: the branches the dashboard and CLI tests
reach only through trained models."""

from __future__ import annotations

import pytest

from headrace.store.outcomes import (
    Outcome,
    Result,
    Via,
    job_outcome,
    version_outcome,
    via_of,
)
from headrace.store.versions import AliasPointer


def _moved(version: int, previous: int | None, reason: str) -> AliasPointer:
    return AliasPointer(version, "sha", previous, "2026-11-27T00:00:00Z", reason)


@pytest.mark.parametrize("outcome", [
    Outcome(Result.PROMOTED),
    Outcome(Result.PROMOTED, "the gate had kept it: below production", via=Via.LIVE_GATE),
    Outcome(Result.KEPT, "accuracy 0.80 < production 0.85"),
    Outcome(Result.REFUSED, "at chance: p=0.4"),
    Outcome(Result.ROLLED_BACK, "production rolled back to v1"),
    Outcome(Result.PROMOTED, "by hand", via=Via.HAND),
])
def test_a_line_reads_back_as_the_same_outcome(outcome: Outcome) -> None:
    back = Outcome.from_line(outcome.line())
    assert (back.result, back.reason, back.via) == (outcome.result, outcome.reason, outcome.via)


def test_lines_as_every_view_prints_them_and_older_reasons_read_as_kept() -> None:
    assert Outcome(Result.PROMOTED, via=Via.JOB).line() == "promoted"  # the job: not said
    assert Outcome(Result.PROMOTED, "x", via=Via.CANARY).line() == "promoted (canary): x"
    assert Outcome.from_line(None) == Outcome(Result.PROMOTED)
    assert Outcome.from_line("accuracy below production") == Outcome(
        Result.KEPT, "accuracy below production")  # the gate's reasons alone (older format)
    assert Outcome.from_line("promoted (mystery): x").via is None
    assert Outcome(Result.REFUSED, "r", ("chance",)).to_json() == {
        "result": "refused", "reason": "r", "held_by": ["chance"], "via": None,
        "line": "refused: r"}


def test_a_jobs_outcome_from_its_status_and_its_versions_gate() -> None:
    assert job_outcome({"state": "failed"}) is None  # nothing was judged
    assert job_outcome({"state": "running", "promoted": True}) is None
    assert job_outcome({"state": "succeeded"}) is None  # no decision recorded
    assert job_outcome({"result": "promoted", "reason": "ignored"}) == Outcome(Result.PROMOTED)
    assert job_outcome({"result": "kept", "gate_reasons": ["a", "", "b"]},
                       {"held_by": "rule-1"}) == Outcome(Result.KEPT, "a; b", ("rule-1",))
    assert job_outcome({"result": "refused", "reason": "chance"}).reason == "chance"  # type: ignore[union-attr]
    assert job_outcome({"promoted": True}) == Outcome(Result.PROMOTED)
    assert job_outcome({"promoted": False}, {"passed": False, "reasons": ["worse"]}) == Outcome(
        Result.REFUSED, "worse")
    assert job_outcome({"promoted": False}, {"passed": True, "promote": False}) == Outcome(
        Result.KEPT, "promotion off")


def test_what_production_did_with_a_version_outranks_its_gate() -> None:
    history = [_moved(1, None, "job job-1"), _moved(2, 1, "live gate: better on live labels"),
               _moved(1, 2, "rollback: error rate")]
    kept = {"passed": True, "reasons": ["below production"]}
    # v2: kept by its job's gate, promoted by the live gate, then rolled back.
    assert version_outcome(gate=kept, version=2, history=history) == Outcome(
        Result.ROLLED_BACK, "production rolled back to v1")
    # v2 before the rollback: promoted later, saying what the gate had said.
    assert version_outcome(gate=kept, version=2, history=history[:2]) == Outcome(
        Result.PROMOTED, "the gate had kept it: below production", (), Via.LIVE_GATE)
    assert version_outcome(gate=None, version=1, history=history).via == Via.ROLLBACK
    assert version_outcome(gate=None, version=1, history=history[:1]) == Outcome(
        Result.PROMOTED, via=Via.JOB)
    # Never production: its job's outcome, else its gate, else nothing known.
    assert version_outcome(gate={"passed": False, "reasons": ["chance"], "held_by": ["c"]},
                           version=3, history=history) == Outcome(Result.REFUSED, "chance",
                                                                  ("c",))
    assert version_outcome(gate=kept, version=3, history=history,
                           job_status={"result": "refused", "reason": "r"}
                           ) == Outcome(Result.REFUSED, "r")
    assert version_outcome(gate={"passed": "yes"}, version=3, history=history) is None


def test_a_version_promoted_again_after_a_rollback_is_promoted() -> None:
    history = [_moved(1, None, "job j1"), _moved(2, 1, "job j2"), _moved(1, 2, "rollback"),
               _moved(2, 1, "manual promote")]
    assert version_outcome(gate=None, version=2, history=history) == Outcome(
        Result.PROMOTED, via=Via.HAND)


def test_via_of_reads_each_writers_reason() -> None:
    assert [via_of(r) for r in ("job job-7", "live gate: x", "canary 100%", "manual",
                                "rollback: y", "", "jobless")] == [
        Via.JOB, Via.LIVE_GATE, Via.CANARY, Via.HAND, Via.ROLLBACK, None, None]
