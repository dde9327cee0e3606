"""The exact two-sample KS statistic from counts on a fixed grid: the reference's sample points.

Between two consecutive reference points ``u_{j-1} < u_j`` the reference CDF is constant and the
live CDF only rises, so ``sup_x |F_ref(x) - F_live(x)|`` over the pooled points is reached at a
reference point (``F_live(u_j)``, values ``<= u_j``) or just below one (``F_live(u_j-)``, values
``< u_j``). Both come from two count arrays per window:

* ``below[j]``: live values with ``u_{j-1} < x <= u_j`` (``j = k``: above the last point;
  ``j = k + 1``: missing values, which KS leaves out, as ``ks_statistic`` does);
* ``ties[j]``: live values equal to ``u_j``.

So a live window keeps ``k + 2`` and ``k`` integers per numeric feature instead of its values
(what makes the window restart-safe: the counts are small and persistable), and calibration gets
every resampled window's KS from one ``bincount`` instead of a sort. The value equals
``statistics.ks_statistic`` (and scipy's ``ks_2samp``) exactly, ties included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KsGrid:
    points: np.ndarray  # the distinct reference sample values, sorted
    ref_le: np.ndarray  # F_ref(u_j): share of the sample <= u_j
    ref_lt: np.ndarray  # F_ref(u_j-): share of the sample < u_j

    @classmethod
    def of(cls, sample_sorted: np.ndarray) -> KsGrid:
        s = np.asarray(sample_sorted, dtype=np.float64)
        points = np.unique(s)
        m = max(s.size, 1)
        return cls(points=points, ref_le=np.searchsorted(s, points, side="right") / m,
                   ref_lt=np.searchsorted(s, points, side="left") / m)

    @property
    def size(self) -> int:
        return int(self.points.size)

    def index(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each value's cell (``below`` index) and whether it equals a grid point."""
        x = np.asarray(values, dtype=np.float64)
        k = self.size
        cell = np.searchsorted(self.points, x, side="left")
        tie = np.zeros(x.shape, dtype=bool)
        if k:
            tie = self.points[np.minimum(cell, k - 1)] == x
        missing = np.isnan(x)
        if missing.any():
            cell[missing] = k + 1
        return cell, tie

    def counts(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cell, tie = self.index(values)
        k = self.size
        below = np.bincount(cell, minlength=k + 2)
        ties = np.bincount(cell[tie], minlength=k) if tie.any() else np.zeros(k, np.int64)
        return below, ties

    def statistic(self, below: np.ndarray, ties: np.ndarray) -> np.ndarray:
        """KS of each window (leading axes) from its counts; 0 for a window without values."""
        b = np.asarray(below, dtype=np.float64)
        t = np.asarray(ties, dtype=np.float64)
        k = self.size
        n = b[..., : k + 1].sum(axis=-1, keepdims=True)
        if k == 0:
            return np.zeros(n.shape[:-1])
        cum = np.cumsum(b[..., :k], axis=-1)
        safe = np.where(n > 0, n, 1.0)
        le = np.abs(self.ref_le - cum / safe).max(axis=-1)
        lt = np.abs(self.ref_lt - (cum - t) / safe).max(axis=-1)
        return np.where(n[..., 0] > 0, np.maximum(le, lt), 0.0)
