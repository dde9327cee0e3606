"""The statistics that compare two model versions on the same records (the counts are
``rollout.tally.LiveTally``): McNemar's exact paired test, Wilson intervals for live accuracy,
and CBPE's estimate before labels arrive.

Pairing is what makes this cheap in traffic: McNemar looks only at the discordant records (one
version right, the other wrong), so far fewer labelled records tell two models apart than two
independent arms would need.

Exact tests without scipy at run time: the binomial tail is summed in log space (``lgamma``);
the tests check it against ``scipy.stats.binomtest``.
"""

from __future__ import annotations

import math

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
