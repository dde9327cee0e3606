"""One model version's live drift on one stream, as a scorer tracks it: the open window, its
sequence number, each feature's run of drifting windows, and the events a closed window gives.

Window close, in order:
1. every feature's statistics from the window's counts (``windows.DriftWindow.close``);
2. a window of at least the calibrated records decides each feature's state: drifting when an
   alarm test is over its threshold, else not. A window closed short (by the time bound) is
   reported (``last``) but never changes a state: its thresholds would not hold;
3. one ``DriftDetected`` per feature that drifts or whose state changed;
4. the next window opens empty.
``state``/``resume`` carry all of it across a scorer restart (``DriftWindowState``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from headrace.contracts import DriftDetected, DriftWindowState, WindowRange
from headrace.contracts.base import utcnow
from headrace.drift.fitting import DriftProfile
from headrace.drift.windows import DriftWindow, FeatureDrift


@dataclass
class VersionTracker:
    stream: str
    model_name: str
    model_version: int
    scope: str  # whose window (the scorer's partitions, or its host)
    profile: DriftProfile
    window: DriftWindow = field(init=False)
    seq: int = 0
    consecutive: dict[str, int] = field(default_factory=dict)
    drifting: dict[str, bool] = field(default_factory=dict)
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    opened_at: datetime = field(default_factory=utcnow)
    last: list[FeatureDrift] = field(default_factory=list)  # the last closed window
    last_counts: dict[str, str] = field(default_factory=dict)  # its counts (snapshot form)
    last_rows: int = 0

    def __post_init__(self) -> None:
        self.window = DriftWindow(self.profile.features, self.profile.calibration)

    def add(self, features: dict[str, np.ndarray], partitions: np.ndarray,
            offsets: np.ndarray) -> None:
        """Count a batch's features; ``partitions``/``offsets``: its scored records'."""
        self.window.add(features)
        for p in np.unique(partitions).tolist():
            o = offsets[partitions == p]
            lo, hi = int(o.min()), int(o.max())
            have = self.ranges.get(p)
            self.ranges[p] = (lo, hi) if have is None else (min(have[0], lo), max(have[1], hi))

    def due(self, *, now: datetime, time_bound_s: float) -> bool:
        return self.window.full or (
            self.window.rows > 0 and (now - self.opened_at).total_seconds() >= time_bound_s)

    def close(self, *, now: datetime | None = None) -> list[DriftDetected]:
        """Close the window (see the module's steps); the events to publish."""
        full = self.window.full
        rows = self.window.rows
        ranges = self._ranges()
        self.last_counts, self.last_rows = self.window.snapshot(), rows
        self.last = self.window.close()
        self.seq += 1
        self.ranges = {}
        self.opened_at = now or utcnow()
        if not full:
            return []
        events = []
        for fd in self.last:
            was = self.drifting.get(fd.feature, False)
            now_drifting = bool(fd.fired)
            self.consecutive[fd.feature] = (self.consecutive.get(fd.feature, 0) + 1
                                            if now_drifting else 0)
            self.drifting[fd.feature] = now_drifting
            if not now_drifting and not was:
                continue
            test = _headline(fd)
            events.append(DriftDetected(
                stream=self.stream, model_name=self.model_name, model_version=self.model_version,
                feature=fd.feature, statistic=test, value=fd.statistics.get(test, 0.0),
                threshold=fd.thresholds.get(test, 0.0), drifting=now_drifting,
                statistics=fd.statistics, window=self.seq,
                consecutive=self.consecutive[fd.feature], rows=rows, ranges=ranges,
                scorer=self.scope, live=list(fd.counts)))
        return events

    def _ranges(self) -> list[WindowRange]:
        return [WindowRange(partition=p, first=lo, last=hi)
                for p, (lo, hi) in sorted(self.ranges.items())]

    def state(self) -> DriftWindowState:
        return DriftWindowState(
            stream=self.stream, model_name=self.model_name, model_version=self.model_version,
            scope=self.scope, window=self.seq, rows=self.window.rows,
            counts=self.window.snapshot(), consecutive=dict(self.consecutive),
            drifting=dict(self.drifting), ranges=self._ranges(), last=self.last_counts,
            last_rows=self.last_rows, opened_at=self.opened_at)

    def resume(self, state: DriftWindowState) -> None:
        """Continue from a persisted state of this stream, version and scope."""
        self.window.restore(state.counts, state.rows)
        self.seq = state.window
        self.consecutive = dict(state.consecutive)
        self.drifting = dict(state.drifting)
        self.ranges = {r.partition: (r.first, r.last) for r in state.ranges}
        self.last_counts, self.last_rows = dict(state.last), state.last_rows
        self.opened_at = state.opened_at


def _headline(fd: FeatureDrift) -> str:
    """The test an event names: the one furthest over (or nearest to) its threshold."""
    if not fd.thresholds:
        return next(iter(fd.statistics), "psi")
    return max(fd.thresholds, key=lambda t: fd.statistics.get(t, 0.0) / fd.thresholds[t]
               if fd.thresholds[t] > 0 else np.inf)
