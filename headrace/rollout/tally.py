"""The one live-count type: what a (production, candidate) pair did on the stream, as counts.

``LiveTally`` holds the counters of ``contracts.LiveCounts`` (named once there:
``LiveCounts.SUMMED`` and ``LiveCounts.MATRICES``) and adds them one way (``add``), whoever
sums: a scorer's partition (``scorers.rollout.live_counts.PartitionCounts``), a scorer's total, a
stream's evidence (``rollout.evidence.LiveEvidence``) or an offline recount (``add_rows``).
What follows from the counts (agreement, live accuracy with Wilson intervals, McNemar, CBPE's
estimate) is computed here too, so every view reads the same figures.

Everything summed is an integer (or a sum of probabilities), so partitions and replicas add up
and an offline recount of the same records gives the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from headrace.contracts import LiveCounts
from headrace.core.errors import ValidationFailed
from headrace.rollout.comparison import mcnemar, wilson_interval


def square(m: Any, k: int, what: str) -> np.ndarray:
    """``m`` (a list of lists, an array, or empty for none yet) as a k x k integer matrix."""
    if m is None or len(m) == 0:
        return np.zeros((k, k), np.int64)
    a = np.asarray(m, dtype=np.int64)
    if a.shape != (k, k):
        raise ValidationFailed(f"{what} is {a.shape[0]}x{a.shape[1] if a.ndim > 1 else 0}, "
                               f"not {k}x{k}")
    return a


def _empty() -> np.ndarray:
    return np.zeros((0, 0), np.int64)


@dataclass
class LiveTally:
    """The counters of one pair over some records (``k`` classes)."""

    k: int
    rows: int = 0  # records scored by both versions (paired)
    matrix: np.ndarray = field(default_factory=_empty)  # production class x candidate class
    candidate_errors: int = 0  # rows the candidate failed on or dropped
    production_errors: int = 0
    production_confidence: float = 0.0  # sums of the top-class probability (CBPE)
    candidate_confidence: float = 0.0
    labelled: int = 0
    production_truth: np.ndarray = field(default_factory=_empty)  # truth x predicted
    candidate_truth: np.ndarray = field(default_factory=_empty)
    only_production_right: int = 0  # McNemar's b (labelled, paired)
    only_candidate_right: int = 0  # McNemar's c

    def __post_init__(self) -> None:
        for name in LiveCounts.MATRICES:
            if getattr(self, name).shape != (self.k, self.k):
                setattr(self, name, np.zeros((self.k, self.k), np.int64))

    def add(self, counts: LiveTally | LiveCounts) -> None:
        """Add another tally or a ``LiveCounts`` record, field by field."""
        for name in LiveCounts.SUMMED:
            setattr(self, name, getattr(self, name) + getattr(counts, name))
        for name in LiveCounts.MATRICES:
            getattr(self, name)[...] += square(getattr(counts, name), self.k, name)

    def add_rows(self, production: np.ndarray, candidate: np.ndarray,
                 truth: np.ndarray | None = None) -> None:
        """Records both versions scored, as class indices; ``truth`` where a label is known
        (-1: not yet). The offline recount of what the scorer counts batch by batch."""
        p = np.asarray(production, dtype=np.int64)
        c = np.asarray(candidate, dtype=np.int64)
        np.add.at(self.matrix, (p, c), 1)
        self.rows += int(p.size)
        if truth is None:
            return
        t = np.asarray(truth, dtype=np.int64)
        known = t >= 0
        tk, pk, ck = t[known], p[known], c[known]
        self.labelled += int(tk.size)
        np.add.at(self.production_truth, (tk, pk), 1)
        np.add.at(self.candidate_truth, (tk, ck), 1)
        pr, cr = pk == tk, ck == tk
        self.only_production_right += int(np.count_nonzero(pr & ~cr))
        self.only_candidate_right += int(np.count_nonzero(cr & ~pr))

    def fields(self) -> dict[str, Any]:
        """The counters as ``LiveCounts`` takes them (matrices as lists)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in LiveCounts.SUMMED}
        for name in LiveCounts.MATRICES:
            out[name] = getattr(self, name).tolist()
        return out

    def swapped(self) -> dict[str, Any]:
        """The counters seen from the other side (production and candidate exchanged), as
        keyword arguments of a tally."""
        return {"k": self.k, "rows": self.rows, "matrix": self.matrix.T.copy(),
                "candidate_errors": self.production_errors,
                "production_errors": self.candidate_errors,
                "production_confidence": self.candidate_confidence,
                "candidate_confidence": self.production_confidence, "labelled": self.labelled,
                "production_truth": self.candidate_truth.copy(),
                "candidate_truth": self.production_truth.copy(),
                "only_production_right": self.only_candidate_right,
                "only_candidate_right": self.only_production_right}

    @property
    def agreement(self) -> float:
        paired = int(self.matrix.sum())
        return float(np.trace(self.matrix)) / paired if paired else math.nan

    def accuracy(self, version: str) -> tuple[float, tuple[float, float]]:
        """Live accuracy of ``production`` or ``candidate`` on the labelled records, with the
        95% Wilson interval; nan without labels."""
        truth = self.production_truth if version == "production" else self.candidate_truth
        n = int(truth.sum())
        if not n:
            return math.nan, (0.0, 1.0)
        right = int(np.trace(truth))
        return right / n, wilson_interval(right, n)

    def estimated_accuracy(self, version: str) -> float:
        """CBPE: the mean top-class probability over the scored rows (an estimate that
        assumes calibrated scores)."""
        total = (self.production_confidence if version == "production"
                 else self.candidate_confidence)
        return total / self.rows if self.rows else math.nan

    def mcnemar_p(self, *, alternative: str = "two-sided") -> float:
        return mcnemar(self.only_production_right, self.only_candidate_right,
                       alternative=alternative)
