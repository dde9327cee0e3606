"""Quantiles from a cumulative histogram, interpolated inside the bucket that holds them.

The rank is placed linearly between the bucket's lower and upper bound (as Prometheus's
``histogram_quantile`` does), so a p99 of 23 ms in a 20-25 ms bucket reads 23, not 25. A
quantile in the ``+Inf`` bucket has no upper bound to interpolate to: it is reported as
``inf`` (shown as "over the last bound"), never as the last bound itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def bucket_quantile(buckets: Iterable[tuple[float, float]], q: float) -> float | None:
    """``q`` (0..1) of a histogram given as (upper bound, cumulative count) pairs.

    None when the histogram holds nothing. Pairs may come unsorted and repeated (several
    series of one histogram): counts of the same bound are added.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    merged: dict[float, float] = {}
    for le, count in buckets:
        merged[le] = merged.get(le, 0.0) + count
    points = sorted(merged.items())
    if not points or points[-1][1] <= 0:
        return None
    rank = q * points[-1][1]
    lower, below = 0.0, 0.0
    for le, count in points:
        if count >= rank and count > below:
            if math.isinf(le):
                return math.inf
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return points[-1][0]


def bucket_difference(new: Iterable[tuple[float, float]],
                      old: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The observations made between two scrapes of one histogram, as cumulative buckets.

    A counter that went down (the scorer restarted) means ``new`` holds only what came since:
    it is returned whole.
    """
    n: dict[float, float] = {}
    for le, c in new:
        n[le] = n.get(le, 0.0) + c
    o: dict[float, float] = {}
    for le, c in old:
        o[le] = o.get(le, 0.0) + c
    diff = [(le, c - o.get(le, 0.0)) for le, c in sorted(n.items())]
    if any(c < 0 for _, c in diff):
        return sorted(n.items())
    return diff
