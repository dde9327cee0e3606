"""A stream's live evidence for one (production, candidate) pair: the latest ``LiveCounts`` of
every partition summed, and what follows from it (agreement, both confusion matrices, live
accuracy with Wilson intervals, exact McNemar on the discordant labelled records, and before
labels CBPE's estimate, which assumes calibrated scores).

Everything summed is an integer count (or a sum of probabilities), so the stream's figures
equal an offline recount of the same records exactly, however many scorers made them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from headrace.contracts import LiveCounts
from headrace.core.errors import ValidationFailed
from headrace.rollout.comparison import mcnemar, wilson_interval
from headrace.rollout.live_sum import add_counts

ESTIMATE_NOTE = "estimate (assumes calibration)"


@dataclass
class LiveEvidence:
    stream: str
    model_name: str
    production_version: int
    candidate_version: int
    classes: list[str]
    partitions: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    rows: int = 0
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    candidate_errors: int = 0
    production_errors: int = 0
    production_confidence: float = 0.0
    candidate_confidence: float = 0.0
    labelled: int = 0
    production_truth: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    candidate_truth: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    only_production_right: int = 0
    only_candidate_right: int = 0

    @classmethod
    def of(cls, counts: list[LiveCounts]) -> LiveEvidence:
        """Sum the latest record of each partition (``counts``: one per partition, one pair)."""
        if not counts:
            raise ValidationFailed("no live counts to sum")
        first = counts[0]
        k = len(first.classes)
        ev = cls(first.stream, first.model_name, first.production_version,
                 first.candidate_version, list(first.classes),
                 matrix=np.zeros((k, k), np.int64),
                 production_truth=np.zeros((k, k), np.int64),
                 candidate_truth=np.zeros((k, k), np.int64))
        for c in sorted(counts, key=lambda c: c.partition):
            if (c.stream, c.model_name, c.production_version, c.candidate_version) != (
                    ev.stream, ev.model_name, ev.production_version, ev.candidate_version):
                raise ValidationFailed(f"live counts of another pair: {c.key().decode()}")
            if list(c.classes) != ev.classes:
                raise ValidationFailed(f"partition {c.partition}: classes {c.classes} differ "
                                       f"from {ev.classes}")
            ev.partitions.append(c.partition)
            if c.role.value not in ev.roles:
                ev.roles.append(c.role.value)
            add_counts(ev, c, k)
        return ev

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

    def confusion_share(self, production: str, candidate: str) -> float | None:
        """Of the records production called ``production``, the share the candidate called
        ``candidate``; None when a class is unknown."""
        if production not in self.classes or candidate not in self.classes:
            return None
        i, j = self.classes.index(production), self.classes.index(candidate)
        row = int(self.matrix[i].sum())
        return int(self.matrix[i, j]) / row if row else 0.0

    def as_dict(self) -> dict[str, Any]:
        pa, pci = self.accuracy("production")
        ca, cci = self.accuracy("candidate")

        def num(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "stream": self.stream, "model": self.model_name,
            "production_version": self.production_version,
            "candidate_version": self.candidate_version, "roles": self.roles,
            "partitions": self.partitions, "classes": self.classes, "rows": self.rows,
            "agreement": num(self.agreement), "matrix": self.matrix.tolist(),
            "production_errors": self.production_errors,
            "candidate_errors": self.candidate_errors, "labelled": self.labelled,
            "production_truth": self.production_truth.tolist(),
            "candidate_truth": self.candidate_truth.tolist(),
            "production_accuracy": num(pa), "production_accuracy_ci": list(pci),
            "candidate_accuracy": num(ca), "candidate_accuracy_ci": list(cci),
            "only_production_right": self.only_production_right,
            "only_candidate_right": self.only_candidate_right,
            "mcnemar_p": self.mcnemar_p() if self.labelled else None,
            "mcnemar_p_candidate_better": (self.mcnemar_p(alternative="greater")
                                           if self.labelled else None),
            "estimated_accuracy": {"production": num(self.estimated_accuracy("production")),
                                   "candidate": num(self.estimated_accuracy("candidate")),
                                   "note": ESTIMATE_NOTE},
        }

