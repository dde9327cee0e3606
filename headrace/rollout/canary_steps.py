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
* **Rollback** too when, with labels (``labels.<stream>`` joined to each arm's predictions),
  the candidate's live accuracy is worse than production's by more than ``max_accuracy_drop``
  with 95% confidence: the Wilson upper bound of the candidate's accuracy below production's
  lower bound minus the margin, and never on fewer than ``ACCURACY_MIN_LABELLED`` labelled
  records of either arm.
* **Advance** after ``min_records`` candidate records in the current step (and
  ``min_labelled`` labelled candidate records joined since the step began), when the
  candidate's error rate (and, with ``max_accuracy_drop``, its live accuracy) is not worse than
  production's by more than the margin (a doubtful candidate holds, gathering evidence, until
  it is clearly fine or clearly worse). The step after the last below 100 is promotion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from headrace.contracts import Canary
from headrace.rollout.comparison import wilson_interval

ACCURACY_MIN_LABELLED = 30  # per arm: fewer labelled records never roll back


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


@dataclass(frozen=True)
class Labelled:
    """One arm's labelled records and how many of them its prediction got right."""

    labelled: int = 0
    correct: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.labelled if self.labelled else float("nan")

    def text(self) -> str:
        return f"{self.accuracy:.4f} ({self.correct}/{self.labelled})"


@dataclass
class Ledger:
    """One scorer's counts for one canary (one salt): both arms since it began, and the
    candidate's records since the current step began. The labelled counts are the persisted
    totals of the scorer's partitions (``labels``); a step counts those that grew during it."""

    salt: str
    percent: float
    candidate: Arm = field(default_factory=Arm)
    production: Arm = field(default_factory=Arm)
    step_records: int = 0
    candidate_labels: Labelled = field(default_factory=Labelled)
    production_labels: Labelled = field(default_factory=Labelled)
    step_labelled_from: int = 0  # the candidate's labelled total when the step began

    @property
    def step_labelled(self) -> int:
        return self.candidate_labels.labelled - self.step_labelled_from

    def follow(self, canary: Canary) -> None:
        """The canary moved to another step (here or on another replica): count it afresh."""
        if canary.percent != self.percent:
            self.percent = canary.percent
            self.step_records = 0
            self.step_labelled_from = self.candidate_labels.labelled

    def labels(self, production: Labelled, candidate: Labelled, *,
               new_step: bool = False) -> None:
        """The arms' labelled totals now; ``new_step``: count the step's from here (a
        scorer that starts mid-step: a step takes longer after a restart, never less)."""
        self.production_labels, self.candidate_labels = production, candidate
        if new_step:
            self.step_labelled_from = candidate.labelled

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
    worse = _accuracy_worse(canary, ledger)
    if worse is not None and worse[0]:
        return Decision(Verdict.ROLLBACK, worse[1])
    if ledger.step_records < canary.min_records:
        return Decision(Verdict.HOLD, f"{ledger.step_records}/{canary.min_records} candidate "
                                      f"records at {canary.percent:g}%")
    if ledger.step_labelled < canary.min_labelled:
        return Decision(Verdict.HOLD, f"{ledger.step_labelled}/{canary.min_labelled} labelled "
                                      f"candidate records at {canary.percent:g}%")
    if cand.rate - prod.rate > margin:
        return Decision(Verdict.HOLD, f"{rates}: not yet clearly worse; holding at "
                                      f"{canary.percent:g}%")
    if worse is not None:  # [1]: the point estimates are worse by more than the margin
        return Decision(Verdict.HOLD, f"{worse[1]}; holding at {canary.percent:g}%")
    if not canary.steps:
        return Decision(Verdict.HOLD, f"no further step after {canary.percent:g}%")
    nxt = canary.steps[0]
    if nxt >= 100:
        return Decision(Verdict.PROMOTE, f"{ledger.step_records} candidate records at "
                                         f"{canary.percent:g}%; {rates}", 100.0)
    return Decision(Verdict.ADVANCE, f"{ledger.step_records} candidate records at "
                                     f"{canary.percent:g}%; {rates}", nxt)


def _accuracy_worse(canary: Canary, ledger: Ledger) -> tuple[bool, str] | None:
    """(clearly worse, why) when the candidate's live accuracy is below production's by more
    than ``max_accuracy_drop``: clearly with 95% Wilson bounds, else by the point estimates;
    None when it is not (or the rule is off, or either arm has too few labelled records)."""
    drop = canary.max_accuracy_drop
    cand, prod = ledger.candidate_labels, ledger.production_labels
    if drop is None or min(cand.labelled, prod.labelled) < ACCURACY_MIN_LABELLED:
        return None
    text = (f"candidate live accuracy {cand.text()}, production {prod.text()} on labelled "
            "records")
    cand_high = wilson_interval(cand.correct, cand.labelled)[1]
    prod_low = wilson_interval(prod.correct, prod.labelled)[0]
    if prod_low - cand_high > drop:
        return True, (f"{text}: worse by more than the margin {drop} (95% Wilson bounds)")
    if prod.accuracy - cand.accuracy > drop:
        return False, f"{text}: not yet clearly worse"
    return None


def advanced(canary: Canary, percent: float) -> Canary:
    """The canary at its next step."""
    return canary.model_copy(update={"percent": percent, "steps": list(canary.steps[1:])})
