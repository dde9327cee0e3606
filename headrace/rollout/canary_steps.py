"""What a canary does next, from the records one scorer has routed: hold, advance to the next
step, promote, or roll back. Pure: the scorer counts and publishes, this decides.

Counted in records (input messages), never in minutes, per arm: how many each model was given
and how many it failed on (dead-lettered for its input, or the model raised / returned a
non-finite score). Both arms are drawn by the same salted hash, so an input problem lands in
each at the same rate and the error rates compare the models.

* **Rollback** when the candidate's error rate is worse than production's by more than
  ``max_error_rate_margin`` with 95% confidence: the Wilson lower bound of the candidate's rate
  minus the Wilson upper bound of production's. A candidate that fails every record is caught in
  the first batch that routes ~20 records to it; one failure among a few records is noise and
  does not roll back.
* **Advance** after ``min_records`` candidate records in the current step, when the candidate's
  error rate is not worse than production's by more than the margin (a doubtful candidate
  holds, gathering evidence, until it is clearly fine or clearly worse). The step after the last
  below 100 is promotion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from headrace.contracts import Canary
from headrace.rollout.comparison import wilson_interval


class Verdict(StrEnum):
    HOLD = "hold"
    ADVANCE = "advance"
    PROMOTE = "promote"
    ROLLBACK = "rollback"


@dataclass
class Arm:
    """Records one model was given, and how many it failed on."""

    records: int = 0
    errors: int = 0

    @property
    def rate(self) -> float:
        return self.errors / self.records if self.records else 0.0

    def add(self, records: int, errors: int) -> None:
        self.records += records
        self.errors += errors


@dataclass
class Ledger:
    """One scorer's counts for one canary (one salt): both arms since it began, and the
    candidate's records since the current step began."""

    salt: str
    percent: float
    candidate: Arm = field(default_factory=Arm)
    production: Arm = field(default_factory=Arm)
    step_records: int = 0

    def follow(self, canary: Canary) -> None:
        """The canary moved to another step (here or on another replica): count it afresh."""
        if canary.percent != self.percent:
            self.percent = canary.percent
            self.step_records = 0

    def add(self, *, candidate: tuple[int, int], production: tuple[int, int]) -> None:
        self.candidate.add(*candidate)
        self.production.add(*production)
        self.step_records += candidate[0]


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    next_percent: float | None = None  # ADVANCE: the new percent; PROMOTE: 100


def judge(canary: Canary, ledger: Ledger) -> Decision:
    cand, prod = ledger.candidate, ledger.production
    margin = canary.max_error_rate_margin
    cand_low = wilson_interval(cand.errors, cand.records)[0] if cand.records else 0.0
    prod_high = wilson_interval(prod.errors, prod.records)[1] if prod.records else 1.0
    rates = (f"candidate error rate {cand.rate:.4f} ({cand.errors}/{cand.records}), "
             f"production {prod.rate:.4f} ({prod.errors}/{prod.records})")
    if cand_low - prod_high > margin:
        return Decision(Verdict.ROLLBACK, f"{rates}: worse by more than the margin {margin} "
                                          "(95% Wilson bounds)")
    if ledger.step_records < canary.min_records:
        return Decision(Verdict.HOLD, f"{ledger.step_records}/{canary.min_records} candidate "
                                      f"records at {canary.percent:g}%")
    if canary.min_labelled > 0:  # the label join does not report to the canary (yet)
        return Decision(Verdict.HOLD, f"waiting for {canary.min_labelled} labelled records")
    if cand.rate - prod.rate > margin:
        return Decision(Verdict.HOLD, f"{rates}: not yet clearly worse; holding at "
                                      f"{canary.percent:g}%")
    if not canary.steps:
        return Decision(Verdict.HOLD, f"no further step after {canary.percent:g}%")
    nxt = canary.steps[0]
    if nxt >= 100:
        return Decision(Verdict.PROMOTE, f"{ledger.step_records} candidate records at "
                                         f"{canary.percent:g}%; {rates}", 100.0)
    return Decision(Verdict.ADVANCE, f"{ledger.step_records} candidate records at "
                                     f"{canary.percent:g}%; {rates}", nxt)


def advanced(canary: Canary, percent: float) -> Canary:
    """The canary at its next step."""
    return canary.model_copy(update={"percent": percent, "steps": list(canary.steps[1:])})
