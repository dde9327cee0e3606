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

from headrace.contracts import LiveCounts
from headrace.core.errors import ValidationFailed
from headrace.rollout.tally import LiveTally

ESTIMATE_NOTE = "estimate (assumes calibration)"


@dataclass(kw_only=True)
class LiveEvidence(LiveTally):
    """A pair's tally on a stream, with the pair it is of and the partitions it sums."""

    stream: str
    model_name: str
    production_version: int
    candidate_version: int
    classes: list[str]
    partitions: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, counts: list[LiveCounts]) -> LiveEvidence:
        """Sum the latest record of each partition (``counts``: one per partition, one pair)."""
        if not counts:
            raise ValidationFailed("no live counts to sum")
        first = counts[0]
        ev = cls(k=len(first.classes), stream=first.stream, model_name=first.model_name,
                 production_version=first.production_version,
                 candidate_version=first.candidate_version, classes=list(first.classes))
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
            ev.add(c)
        return ev

    def flipped(self) -> LiveEvidence:
        """The same evidence seen from the other side (A and B swapped)."""
        return LiveEvidence(**self.swapped(), stream=self.stream, model_name=self.model_name,
                            production_version=self.candidate_version,
                            candidate_version=self.production_version,
                            classes=list(self.classes), partitions=list(self.partitions),
                            roles=list(self.roles))

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

