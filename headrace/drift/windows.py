"""Live drift over windows counted in records: fixed-bin counting on the hot path, the statistics
once per window.

``DriftWindow.add`` only keeps references to the batch's columns; when ``window`` records have
been added, ``close`` counts them into the fixed bins (one ``searchsorted`` or ``index_in`` and
one ``bincount`` per feature), computes every statistic against the reference, compares the
alarm tests with their calibrated thresholds and starts the next window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from headrace.drift.calibration import ALARM_TESTS, REPORTED, Calibration, window_statistics
from headrace.drift.profile import FeatureReference


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's statistics for one closed window."""

    feature: str
    statistics: dict[str, float]
    thresholds: dict[str, float]
    rows: int

    @property
    def fired(self) -> tuple[str, ...]:
        """The alarm tests whose statistic is above its threshold."""
        return tuple(t for t, thr in self.thresholds.items() if self.statistics.get(t, 0.0) > thr)


@dataclass
class DriftWindow:
    references: Mapping[str, FeatureReference]
    calibration: Calibration
    _values: dict[str, list[np.ndarray]] = field(default_factory=dict)
    rows: int = 0

    @property
    def full(self) -> bool:
        return self.rows >= self.calibration.window

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add a batch: each feature's values, all of the same length."""
        n = 0
        for feature in self.references:
            col = columns.get(feature)
            if col is None:
                continue
            arr = np.asarray(col)
            self._values.setdefault(feature, []).append(arr)
            n = max(n, len(arr))
        self.rows += n

    def close(self) -> list[FeatureDrift]:
        """The window's statistics per feature; the next window starts empty."""
        out = []
        for feature, ref in self.references.items():
            parts = self._values.get(feature)
            if not parts:
                continue
            values = np.concatenate(parts)
            stats = window_statistics(ref, values, names=REPORTED[ref.kind])
            thr = self.calibration.thresholds.get(feature, {})
            out.append(FeatureDrift(feature=feature, statistics=stats,
                                    thresholds={t: thr[t] for t in ALARM_TESTS[ref.kind]
                                                if t in thr}, rows=len(values)))
        self._values.clear()
        self.rows = 0
        return out
