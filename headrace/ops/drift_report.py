"""A stream's current drift, per feature: ``headrace drift STREAM`` (and ``--png``).

The state is what the scorers published: the latest ``DriftDetected`` per key on the compacted
``events.drift``, and the open windows on ``control.drift.state``; the reference is the
``drift_profile.json`` of the model version they are about (the newest version with events,
else the one the production alias points at). A profiled feature without an event has never
drifted on that version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from headrace.contracts import DriftDetected, DriftWindowState
from headrace.core.errors import ValidationFailed
from headrace.core.settings import Settings
from headrace.drift.calibration import ALARM_TESTS
from headrace.drift.fitting import PROFILE_FILE, DriftProfile, load_profile
from headrace.drift.profile import CategoryReference, FeatureReference
from headrace.drift.windows import DriftWindow
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.compacted import read_latest
from headrace.streams.topics import ControlTopics


@dataclass(frozen=True)
class FeatureRow:
    feature: str
    kind: str
    drifting: bool | None  # None: no full window has alarmed or recovered yet (no event)
    statistic: str
    value: float | None
    threshold: float | None
    consecutive: int
    window: int | None
    ts: datetime | None


@dataclass(frozen=True)
class DriftReport:
    stream: str
    model_name: str
    model_version: int
    profile: DriftProfile | None
    rows: list[FeatureRow]
    events: dict[str, DriftDetected]  # feature -> latest event
    open_windows: list[DriftWindowState]

    @property
    def drifting(self) -> list[str]:
        return [r.feature for r in self.rows if r.drifting]


def report(conn: KafkaConnection, settings: Settings, stream: str, *,
           model: str | None = None) -> DriftReport:
    topics = ControlTopics.of(settings)
    name = model or stream
    mine = [e for e in read_latest(conn, topics.drift, DriftDetected).values()
            if e.stream == stream and e.model_name == name]
    states = [s for s in read_latest(conn, topics.drift_state, DriftWindowState).values()
              if s.stream == stream and s.model_name == name]
    version = max((e.model_version for e in mine), default=None)
    if version is None:
        version = max((s.model_version for s in states), default=None)
    if version is None:
        pointer = versions.read_alias(settings.dfs_root, name)
        if pointer is None:
            raise ValidationFailed(f"no drift published for stream {stream!r} and model {name!r}, "
                                   f"and the model has no production version")
        version = pointer.version
    profile = _profile(settings.dfs_root, name, version)
    events = {e.feature: e for e in mine if e.model_version == version}
    open_windows = [s for s in states if s.model_version == version]
    features = list(profile.features) if profile else []
    features += [f for f in events if f not in features]
    rows = []
    for f in features:
        e = events.get(f)
        ref = profile.features.get(f) if profile else None
        thresholds = profile.calibration.thresholds.get(f, {}) if profile else {}
        test = e.statistic if e else next(iter(ALARM_TESTS[ref.kind]), "") if ref else ""
        rows.append(FeatureRow(
            feature=f, kind=ref.kind if ref else "?", drifting=e.drifting if e else None,
            statistic=test, value=e.value if e else None,
            threshold=e.threshold if e else thresholds.get(test),
            consecutive=e.consecutive if e else 0, window=e.window if e else None,
            ts=e.ts if e else None))
    return DriftReport(stream=stream, model_name=name, model_version=version, profile=profile,
                       rows=rows, events=events, open_windows=open_windows)


def _profile(root: Path, name: str, version: int) -> DriftProfile | None:
    try:
        mv = versions.load_version(root, name, version, verify=False)
    except versions.VersionNotFound:
        return None
    return load_profile(mv.path, sha256=mv.manifest.files.get(PROFILE_FILE))


def live_counts(rep: DriftReport, feature: str) -> np.ndarray | None:
    """The live counts to draw: the latest event's window, else the scorers' last closed
    windows summed, else their open windows summed."""
    e = rep.events.get(feature)
    if e is not None and e.live:
        return np.asarray(e.live, dtype=np.int64)
    if rep.profile is None or feature not in rep.profile.features:
        return None
    ref = {feature: rep.profile.features[feature]}
    for pick in ((lambda s: (s.last, s.last_rows)), (lambda s: (s.counts, s.rows))):
        total = np.zeros(ref[feature].bins, np.int64)
        for st in rep.open_windows:
            counts, rows = pick(st)
            if feature in counts:
                w = DriftWindow(ref, rep.profile.calibration)
                w.restore({feature: counts[feature]}, rows)
                total += w.bin_counts(feature)
        if total.sum() > 0:
            return total
    return None


def bin_labels(ref: FeatureReference) -> list[str]:
    if isinstance(ref, CategoryReference):
        return [*ref.values, "(unseen)"]
    edges = [f"{e:.4g}" for e in ref.edges]
    lows = ["-inf", *edges]
    highs = [*edges, "inf"]
    return [f"({lo}, {hi}]" for lo, hi in zip(lows, highs, strict=True)] + ["(missing)"]


def render_png(rep: DriftReport, path: Path) -> int:
    """Reference vs live proportions per bin, one panel per feature with live counts; the
    number of panels drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if rep.profile is None:
        raise ValidationFailed(f"{rep.model_name}:{rep.model_version} has no {PROFILE_FILE}")
    panels = [(f, ref, live) for f, ref in rep.profile.features.items()
              if (live := live_counts(rep, f)) is not None]
    if not panels:
        raise ValidationFailed(f"no live drift counts yet for {rep.stream} "
                               f"({rep.model_name}:{rep.model_version})")
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.2 * nrows), dpi=100,
                             squeeze=False)
    drifting = set(rep.drifting)
    for ax, (f, ref, live) in zip(axes.ravel(), panels, strict=False):
        x = np.arange(ref.bins)
        ax.bar(x - 0.2, ref.expected, width=0.4, label="reference (training)")
        ax.bar(x + 0.2, live / max(int(live.sum()), 1), width=0.4, label="live window")
        labels = bin_labels(ref)
        ax.set_xticks(x, labels=labels, rotation=60, ha="right", fontsize=6)
        ax.set_title(f"{f}{'  DRIFTING' if f in drifting else ''}", fontsize=9,
                     color="crimson" if f in drifting else "black")
        ax.set_ylabel("share of records", fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{rep.stream}: {rep.model_name}:{rep.model_version}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return len(panels)
