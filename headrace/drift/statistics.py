"""Drift statistics, each written from its definition so its value is exact and documented.

Binned statistics compare a reference distribution over fixed bins (proportions ``e``, summing to
1) with the counts ``c`` a live window put in the same bins (``n = sum(c)``, ``a = c / n``):

* PSI (population stability index), natural log:
  ``sum_i (a_i - e_i) * ln(a_i / e_i)``, where a zero proportion on either side is replaced by
  ``PSI_FLOOR`` (1e-4) first, as Evidently and NannyML do, so an empty bin costs a bounded amount.
* Jensen-Shannon divergence, base 2 (bounded by 1):
  ``0.5 * KL(a || m) + 0.5 * KL(e || m)`` with ``m = (a + e) / 2`` and ``0 * log 0 = 0``.
* Pearson chi-square statistic: ``sum_i (c_i - n e_i)^2 / (n e_i)`` over bins with ``e_i > 0``;
  a live count in a bin the reference never saw (``e_i = 0``, the "unseen" bucket) adds
  ``c_i^2 / (n * CHI_FLOOR)`` instead of dividing by zero.

The Kolmogorov-Smirnov statistic is the two-sample one, between the reference's stored sample
and the window's values: ``sup_x |F_ref(x) - F_live(x)|`` over the pooled points. Live windows
use its binned form, ``ks_binned``: the same supremum taken at the fixed bins' edges only, from
the counts the window already keeps (the exact one needs every value, or a search in a
1,000-point grid per value: 4 to 20 times the cost of the fixed bins).

None of these needs scipy at run time; the tests check each against scipy or a reference
implementation to 1e-9.
"""

from __future__ import annotations

import numpy as np

PSI_FLOOR = 1e-4
CHI_FLOOR = 1e-4


def proportions(counts: np.ndarray) -> np.ndarray:
    """Counts to proportions; an empty window gives zeros, not NaN."""
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=-1, keepdims=True)
    return np.divide(c, n, out=np.zeros_like(c), where=n > 0)


def psi(expected: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """PSI of each window (last axis: bins) against ``expected`` proportions."""
    e = np.maximum(np.asarray(expected, dtype=np.float64), PSI_FLOOR)
    a = np.maximum(proportions(counts), PSI_FLOOR)
    return np.sum((a - e) * np.log(a / e), axis=-1)


def _kl2(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    safe = np.where(p > 0, p / np.where(q > 0, q, 1.0), 1.0)
    return np.sum(np.where(p > 0, p * np.log2(safe), 0.0), axis=-1)


def jensen_shannon(expected: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """JS divergence (base 2) of each window against ``expected`` proportions."""
    e = np.asarray(expected, dtype=np.float64)
    a = proportions(counts)
    m = (a + e) / 2
    return 0.5 * _kl2(a, m) + 0.5 * _kl2(e, m)


def chi_square(expected: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Pearson's chi-square statistic of each window against ``expected`` proportions."""
    e = np.asarray(expected, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=-1, keepdims=True)
    want = n * np.where(e > 0, e, CHI_FLOOR)
    out = np.divide((c - n * e) ** 2, want, out=np.zeros_like(c), where=want > 0)
    return out.sum(axis=-1)


def ks_statistic(reference_sorted: np.ndarray, live: np.ndarray) -> float:
    """Two-sample KS statistic between a sorted reference sample and the live values."""
    ref = np.asarray(reference_sorted, dtype=np.float64)
    x = np.sort(np.asarray(live, dtype=np.float64))
    if ref.size == 0 or x.size == 0:
        return 0.0
    points = np.concatenate([ref, x])
    f_ref = np.searchsorted(ref, points, side="right") / ref.size
    f_live = np.searchsorted(x, points, side="right") / x.size
    return float(np.max(np.abs(f_ref - f_live)))


def ks_windows(reference_sorted: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """KS statistic of each row of ``windows`` (shape ``(w, n)``) against the reference, in one
    merged sort: the empirical CDFs are the running counts of each side, read at the last of each
    run of equal values (so ties count as scipy counts them)."""
    ref = np.asarray(reference_sorted, dtype=np.float64)
    x = np.asarray(windows, dtype=np.float64)
    w, n = x.shape
    m = ref.size
    if m == 0 or n == 0:
        return np.zeros(w)
    merged = np.concatenate([np.broadcast_to(ref, (w, m)), x], axis=1)
    order = np.argsort(merged, axis=1, kind="stable")
    values = np.take_along_axis(merged, order, axis=1)
    from_ref = order < m
    diff = np.cumsum(from_ref, axis=1) / m - np.cumsum(~from_ref, axis=1) / n
    last_of_run = np.ones_like(from_ref)
    last_of_run[:, :-1] = values[:, 1:] != values[:, :-1]
    return np.max(np.where(last_of_run, np.abs(diff), 0.0), axis=1)


def ks_binned(expected: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """KS at the fixed bins' edges: ``max_j |E_j - A_j|``, with ``E_j``/``A_j`` the cumulative
    reference/live shares of bins ``0..j``, over the non-missing bins only (pass them without
    the missing bin). It is the two-sample KS statistic between the reference's and the
    window's bin indices; a window without values gives 0."""
    e = proportions(np.asarray(expected, dtype=np.float64))  # renormalised without "missing"
    a = proportions(np.asarray(counts, dtype=np.float64))
    c = np.asarray(counts)
    cum_e = np.cumsum(e, axis=-1)
    cum_a = np.cumsum(a, axis=-1)
    d = np.abs(cum_a - cum_e).max(axis=-1)
    return np.where(c.sum(axis=-1) > 0, d, 0.0)
