"""Thresholds with a known false-alarm rate, calibrated on the training data itself.

A fixed rule such as PSI >= 0.1 fires on a large share of small windows of data that did not
drift at all (the smaller the window, the noisier the statistic). Instead, ``calibrate`` draws
``resamples`` windows of the configured size (with replacement) from training rows that were
not used to fit the references (``fitting.fit_profile`` holds them out),
computes every test's statistic on each against the reference, and sets the thresholds so that
the share of those windows in which ANY test fires is at most ``false_alarm_rate``.

The correction across tests is Westfall and Young's min-p: each window's statistics become
empirical upper-tail p-values within their own test's resampled distribution; ``p*`` is the
largest p such that at most ``false_alarm_rate`` of the windows have a min-p at or below it; a
test's threshold is the statistic value at that tail share. Unlike Bonferroni it accounts for
correlated features, so it is not more conservative than it needs to be.

A window alarms on a test when its statistic is strictly above the threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from headrace.drift import statistics as st
from headrace.drift.profile import FeatureReference

RESAMPLES = 2000

# The tests run per kind (the statistics reported beside them are computed too).
ALARM_TESTS: dict[str, tuple[str, ...]] = {"numeric": ("psi", "ks"), "category": ("chi_square",)}
REPORTED: dict[str, tuple[str, ...]] = {"numeric": ("psi", "ks"),
                                        "category": ("chi_square", "jensen_shannon", "psi")}


class Calibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int = Field(ge=1)
    false_alarm_rate: float = Field(gt=0, lt=1)
    resamples: int
    # feature -> test -> threshold (alarm when the statistic is above it)
    thresholds: dict[str, dict[str, float]]


def _ks(expected: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return st.ks_binned(expected[..., :-1], counts[..., :-1])  # the last bin is "missing"


def binned_statistic(name: str, ref: FeatureReference, window_counts: np.ndarray, *,
                     expected: np.ndarray | None = None) -> np.ndarray:
    """``name`` of each window (rows of ``window_counts``, the counts in ``ref``'s bins);
    ``expected``: one reference per row instead of ``ref``'s (features of the same bins)."""
    expected = np.asarray(ref.expected) if expected is None else expected
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray] = {
        "psi": st.psi, "chi_square": st.chi_square, "jensen_shannon": st.jensen_shannon,
        "ks": _ks}[name]
    return fn(expected, window_counts)


def window_statistics(ref: FeatureReference, values: np.ndarray, *,
                      names: tuple[str, ...]) -> dict[str, float]:
    """Every statistic in ``names`` for one live window of one feature."""
    c = ref.count(values)
    return {name: float(binned_statistic(name, ref, c[None, :])[0]) for name in names}


def _resampled(ref: FeatureReference, values: np.ndarray, test: str, idx: np.ndarray) -> np.ndarray:
    return binned_statistic(test, ref, _per_window(ref.bin_of(values)[idx], ref.bins))


def _per_window(bins: np.ndarray, width: int) -> np.ndarray:
    """Counts per row of ``bins`` (shape ``(windows, window)``): one offset ``bincount``."""
    rows = np.arange(bins.shape[0])[:, None] * width
    c = np.bincount((rows + bins).ravel(), minlength=bins.shape[0] * width)
    return c.reshape(bins.shape[0], width)


def calibrate(references: Mapping[str, FeatureReference], values: Mapping[str, np.ndarray], *,
              window: int, false_alarm_rate: float = 0.01, resamples: int = RESAMPLES,
              seed: int = 0) -> Calibration:
    """Thresholds for every feature's alarm tests at a per-window false-alarm rate."""
    rng = np.random.default_rng(seed)
    n = min(len(np.asarray(v)) for v in values.values())
    idx = rng.integers(0, n, size=(resamples, window))  # the same windows for every feature
    tests: list[tuple[str, str]] = []
    stats: list[np.ndarray] = []
    for feature, ref in references.items():
        for test in ALARM_TESTS[ref.kind]:
            tests.append((feature, test))
            stats.append(_resampled(ref, np.asarray(values[feature])[:n], test, idx))
    if not tests:
        return Calibration(window=window, false_alarm_rate=false_alarm_rate,
                           resamples=resamples, thresholds={})
    s = np.stack(stats)  # (tests, resamples)
    # Upper-tail empirical p of each value within its own test: share of resamples >= it.
    order = np.sort(s, axis=1)
    p = (resamples - np.stack([np.searchsorted(order[t], s[t], side="left")
                               for t in range(len(tests))])) / resamples
    min_p = np.sort(p.min(axis=0))
    allowed = int(np.floor(false_alarm_rate * resamples))  # windows that may alarm
    # p*: windows with min-p strictly below it are the alarms; at most `allowed` of them.
    p_star = min_p[allowed] if allowed < resamples else 1.0
    thresholds: dict[str, dict[str, float]] = {}
    for t, (feature, test) in enumerate(tests):
        # The smallest statistic whose tail share is below p*: alarms are values above it.
        below = s[t][p[t] >= p_star]
        thresholds.setdefault(feature, {})[test] = float(below.max()) if below.size else 0.0
    return Calibration(window=window, false_alarm_rate=false_alarm_rate, resamples=resamples,
                       thresholds=thresholds)
