"""Live drift over windows counted in records: fixed-bin counting on the hot path, the statistics
once per window.

``DriftWindow.add`` counts each batch into the fixed bins at once (one ``searchsorted`` or
``index_in`` and one ``bincount`` per feature), so a window holds one integer per bin and never
the values. ``close`` computes
every statistic from the counts, compares the alarm tests with their calibrated thresholds and
starts the next window. ``snapshot``/``restore`` carry the open window's counts across a restart.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from headrace.drift.calibration import ALARM_TESTS, REPORTED, Calibration, binned_statistic
from headrace.drift.profile import FeatureReference


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's statistics for one closed window."""

    feature: str
    statistics: dict[str, float]
    thresholds: dict[str, float]
    rows: int
    counts: tuple[int, ...] = ()  # the window's counts in the reference bins

    @property
    def fired(self) -> tuple[str, ...]:
        """The alarm tests whose statistic is above its threshold."""
        return tuple(t for t, thr in self.thresholds.items() if self.statistics.get(t, 0.0) > thr)


@dataclass
class DriftWindow:
    references: Mapping[str, FeatureReference]
    calibration: Calibration
    rows: int = 0
    _counts: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reset()

    @property
    def full(self) -> bool:
        return self.rows >= self.calibration.window

    def reset(self) -> None:
        self.rows = 0
        self._counts = {name: np.zeros(ref.bins, np.int64)
                        for name, ref in self.references.items()}

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Count a batch: each feature's values, all of the same length (the hot path)."""
        n = 0
        for feature, ref in self.references.items():
            col = columns.get(feature)
            if col is None:
                continue
            self._counts[feature] += ref.count(col)
            n = max(n, len(col))
        self.rows += n

    def statistics(self) -> list[FeatureDrift]:
        """The open window's statistics per feature that has values. Features of one kind and
        bin count are computed together (one numpy call per statistic, not per feature)."""
        groups: dict[tuple[str, int], list[str]] = {}
        for feature, ref in self.references.items():
            if self._counts[feature].any():
                groups.setdefault((ref.kind, ref.bins), []).append(feature)
        stats: dict[str, dict[str, float]] = {}
        for (kind, _), names in groups.items():
            counts = np.stack([self._counts[f] for f in names])
            expected = np.stack([np.asarray(self.references[f].expected) for f in names])
            for stat in REPORTED[kind]:
                values = binned_statistic(stat, self.references[names[0]], counts,
                                          expected=expected)
                for f, v in zip(names, values.tolist(), strict=True):
                    stats.setdefault(f, {})[stat] = float(v)
        out = []
        for feature, ref in self.references.items():  # in profile order
            if feature not in stats:
                continue
            c = self._counts[feature]
            thr = self.calibration.thresholds.get(feature, {})
            out.append(FeatureDrift(feature=feature, statistics=stats[feature],
                                    thresholds={t: thr[t] for t in ALARM_TESTS[ref.kind]
                                                if t in thr}, rows=int(c.sum()),
                                    counts=tuple(c.tolist())))
        return out

    def close(self) -> list[FeatureDrift]:
        """The window's statistics per feature; the next window starts empty."""
        out = self.statistics()
        self.reset()
        return out

    def bin_counts(self, feature: str) -> np.ndarray:
        """The open window's counts in ``feature``'s reference bins (a copy)."""
        return self._counts[feature].copy()

    def snapshot(self) -> dict[str, str]:
        """The open window's counts per feature, compact (zlib of int32, base64)."""
        return {name: base64.b64encode(zlib.compress(
            c.astype("<i4").tobytes(), 1)).decode()
            for name, c in self._counts.items() if c.any()}

    def restore(self, counts: Mapping[str, str], rows: int) -> None:
        """Resume an open window from ``snapshot`` (features the profile lacks are ignored)."""
        self.reset()
        for name, blob in counts.items():
            c = self._counts.get(name)
            if c is None:
                continue
            flat = np.frombuffer(zlib.decompress(base64.b64decode(blob)), "<i4").astype(np.int64)
            if flat.size != c.size:
                raise ValueError(f"drift state for {name!r} does not fit the profile's bins")
            c[:] = flat
        self.rows = rows
