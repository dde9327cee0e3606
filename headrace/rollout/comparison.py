"""Two model versions on the same records: agreement, the production-vs-candidate confusion
matrix, live accuracy with confidence intervals once labels arrive, and McNemar's paired test.

Pairing is what makes this cheap in traffic: McNemar looks only at the discordant records (one
version right, the other wrong), so far fewer labelled records tell two models apart than two
independent arms would need.

Exact tests without scipy at run time: the binomial tail is summed in log space (``lgamma``);
the tests check it against ``scipy.stats.binomtest``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def binomial_tail(k: int, n: int, p: float = 0.5) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p) for i in range(k, n + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def mcnemar(b: int, c: int, *, alternative: str = "two-sided") -> float:
    """Exact McNemar p-value. ``b``: production right and candidate wrong; ``c``: the reverse.
    ``alternative="greater"`` tests whether the candidate is better (c larger than chance)."""
    n = b + c
    if n == 0:
        return 1.0
    if alternative == "greater":
        return binomial_tail(c, n)
    if alternative != "two-sided":
        raise ValueError(f"alternative must be two-sided or greater, not {alternative!r}")
    return min(1.0, 2 * binomial_tail(max(b, c), n))


def wilson_interval(successes: int, n: int, *, z: float = 1.959963984540054
                    ) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def estimated_accuracy(scores: np.ndarray) -> float:
    """CBPE's estimate of accuracy before labels arrive: the mean top-class probability. Valid
    only for a calibrated classifier; callers say it is an estimate."""
    s = np.asarray(scores, dtype=np.float64)
    return float(s.max(axis=1).mean()) if s.size else float("nan")


@dataclass
class PairedComparison:
    """Counts over records scored by both versions; all integers, so they add across scorers
    and windows, survive a restart as they are, and equal an offline recount exactly."""

    classes: int
    agree: int = 0
    total: int = 0
    matrix: np.ndarray | None = None  # production label x candidate label
    labelled: int = 0
    production_right: int = 0
    candidate_right: int = 0
    only_production_right: int = 0  # McNemar's b
    only_candidate_right: int = 0  # McNemar's c

    def __post_init__(self) -> None:
        if self.matrix is None:
            self.matrix = np.zeros((self.classes, self.classes), dtype=np.int64)

    def add(self, production: np.ndarray, candidate: np.ndarray,
            truth: np.ndarray | None = None) -> None:
        """Class indices per record; ``truth`` where labels are known (-1: not yet)."""
        p = np.asarray(production, dtype=np.int64)
        c = np.asarray(candidate, dtype=np.int64)
        assert self.matrix is not None
        np.add.at(self.matrix, (p, c), 1)
        self.agree += int(np.count_nonzero(p == c))
        self.total += int(p.size)
        if truth is None:
            return
        t = np.asarray(truth, dtype=np.int64)
        known = t >= 0
        pr, cr = (p == t) & known, (c == t) & known
        self.labelled += int(np.count_nonzero(known))
        self.production_right += int(np.count_nonzero(pr))
        self.candidate_right += int(np.count_nonzero(cr))
        self.only_production_right += int(np.count_nonzero(pr & ~cr))
        self.only_candidate_right += int(np.count_nonzero(cr & ~pr))

    @property
    def agreement(self) -> float:
        return self.agree / self.total if self.total else float("nan")

    def accuracy(self, version: str) -> tuple[float, tuple[float, float]]:
        """Live accuracy of ``production`` or ``candidate`` with its 95% Wilson interval."""
        right = {"production": self.production_right, "candidate": self.candidate_right}[version]
        if not self.labelled:
            return float("nan"), (0.0, 1.0)
        return right / self.labelled, wilson_interval(right, self.labelled)

    def candidate_better_p(self) -> float:
        """One-sided McNemar p-value that the candidate is more accurate."""
        return mcnemar(self.only_production_right, self.only_candidate_right,
                       alternative="greater")
