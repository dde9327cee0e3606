"""Live drift over windows counted in records: fixed-bin counting on the hot path, the statistics
once per window.

``DriftWindow.add`` counts each batch into the fixed bins at once (one ``searchsorted`` or
``index_in`` and one ``bincount`` per feature; numeric features also into the KS grid,
``ks_grid``), so a window holds a few integers per bin and never the values. ``close`` computes
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
from headrace.drift.ks_grid import KsGrid
from headrace.drift.profile import FeatureReference, NumericReference


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
class _Counts:
    bins: np.ndarray
    below: np.ndarray | None = None  # numeric: KS grid counts
    ties: np.ndarray | None = None

    def parts(self) -> list[np.ndarray]:
        return [a for a in (self.bins, self.below, self.ties) if a is not None]


@dataclass
class DriftWindow:
    references: Mapping[str, FeatureReference]
    calibration: Calibration
    rows: int = 0
    _grids: dict[str, KsGrid] = field(default_factory=dict)
    _counts: dict[str, _Counts] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, ref in self.references.items():
            if isinstance(ref, NumericReference):
                self._grids[name] = ref.grid()
        self.reset()

    @property
    def full(self) -> bool:
        return self.rows >= self.calibration.window

    def reset(self) -> None:
        self.rows = 0
        self._counts = {}
        for name, ref in self.references.items():
            grid = self._grids.get(name)
            self._counts[name] = _Counts(
                np.zeros(ref.bins, np.int64),
                None if grid is None else np.zeros(grid.size + 2, np.int64),
                None if grid is None else np.zeros(grid.size, np.int64))

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Count a batch: each feature's values, all of the same length (the hot path)."""
        n = 0
        for feature, ref in self.references.items():
            col = columns.get(feature)
            if col is None:
                continue
            c = self._counts[feature]
            c.bins += ref.count(col)
            grid = self._grids.get(feature)
            if grid is not None:
                below, ties = grid.counts(col)
                assert c.below is not None and c.ties is not None
                c.below += below
                c.ties += ties
            n = max(n, len(col))
        self.rows += n

    def statistics(self) -> list[FeatureDrift]:
        """The open window's statistics per feature that has values."""
        out = []
        for feature, ref in self.references.items():
            c = self._counts[feature]
            seen = int(c.bins.sum())
            if not seen:
                continue
            stats: dict[str, float] = {}
            for name in REPORTED[ref.kind]:
                if name == "ks":
                    assert c.below is not None and c.ties is not None
                    stats[name] = float(self._grids[feature].statistic(c.below, c.ties))
                else:
                    stats[name] = float(binned_statistic(name, ref, c.bins[None, :])[0])
            thr = self.calibration.thresholds.get(feature, {})
            out.append(FeatureDrift(feature=feature, statistics=stats,
                                    thresholds={t: thr[t] for t in ALARM_TESTS[ref.kind]
                                                if t in thr}, rows=seen,
                                    counts=tuple(int(v) for v in c.bins)))
        return out

    def close(self) -> list[FeatureDrift]:
        """The window's statistics per feature; the next window starts empty."""
        out = self.statistics()
        self.reset()
        return out

    def bin_counts(self, feature: str) -> np.ndarray:
        """The open window's counts in ``feature``'s reference bins (a copy)."""
        return self._counts[feature].bins.copy()

    def snapshot(self) -> dict[str, str]:
        """The open window's counts per feature, compact (zlib of int32, base64)."""
        return {name: base64.b64encode(zlib.compress(
            np.concatenate(c.parts()).astype("<i4").tobytes(), 1)).decode()
            for name, c in self._counts.items() if c.bins.any()}

    def restore(self, counts: Mapping[str, str], rows: int) -> None:
        """Resume an open window from ``snapshot`` (features the profile lacks are ignored)."""
        self.reset()
        for name, blob in counts.items():
            c = self._counts.get(name)
            if c is None:
                continue
            flat = np.frombuffer(zlib.decompress(base64.b64decode(blob)), "<i4").astype(np.int64)
            if flat.size != sum(p.size for p in c.parts()):
                raise ValueError(f"drift state for {name!r} does not fit the profile's bins")
            at = 0
            for part in c.parts():
                part[:] = flat[at: at + part.size]
                at += part.size
        self.rows = rows
