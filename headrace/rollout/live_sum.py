"""One sum over ``LiveCounts``: what a scorer's partitions total (``scorers.live_counts``) and
what a stream's partitions total (``rollout.evidence``) add the same fields the same way, named
once on the contract (``LiveCounts.SUMMED``, ``LiveCounts.MATRICES``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from headrace.contracts import LiveCounts
from headrace.core.errors import ValidationFailed


def square(m: Any, k: int, what: str) -> np.ndarray:
    """``m`` (a list of lists, an array, or empty for none yet) as a k x k integer matrix."""
    if m is None or len(m) == 0:
        return np.zeros((k, k), np.int64)
    a = np.asarray(m, dtype=np.int64)
    if a.shape != (k, k):
        raise ValidationFailed(f"{what} is {a.shape[0]}x{a.shape[1] if a.ndim > 1 else 0}, "
                               f"not {k}x{k}")
    return a


def add_counts(into: Any, counts: Any, k: int) -> None:
    """Add ``counts`` (a ``LiveCounts``, or anything with its summed fields) to ``into``
    (whose matrices are k x k arrays), field by field."""
    for name in LiveCounts.SUMMED:
        setattr(into, name, getattr(into, name) + getattr(counts, name))
    for name in LiveCounts.MATRICES:
        getattr(into, name)[...] += square(getattr(counts, name), k, name)


def as_fields(counts: Any) -> dict[str, Any]:
    """The summed fields of ``counts`` as ``LiveCounts`` takes them (matrices as lists)."""
    out = {name: getattr(counts, name) for name in LiveCounts.SUMMED}
    for name in LiveCounts.MATRICES:
        m = getattr(counts, name)
        out[name] = m.tolist() if isinstance(m, np.ndarray) else m
    return out
