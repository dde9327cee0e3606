"""Thresholds calibrated on training windows hold their false-alarm rate on held-out data of the
same distribution, and a real shift is caught within two windows, naming the feature."""

from __future__ import annotations

import numpy as np

from headrace.drift.fitting import fit_profile
from headrace.drift.windows import DriftWindow

WINDOW = 200


def _table(rng: np.random.Generator, rows: int, *, shift: float = 0.0,
           dominant: str | None = None) -> dict[str, np.ndarray]:
    cols = {f"f{i}": rng.normal(size=rows) for i in range(6)}
    cols["f2"] = rng.gamma(2.0, size=rows)  # skewed, as real features are
    cols["f0"] = cols["f0"] + shift
    cats = rng.choice(np.array(["red", "green", "blue", "grey"], dtype=object), size=rows,
                      p=[0.4, 0.3, 0.2, 0.1])
    if dominant is not None:
        cats[: int(rows * 0.6)] = dominant
        rng.shuffle(cats)
    cols["colour"] = cats
    return cols


def _fit(train: dict[str, np.ndarray]) -> DriftWindow:
    profile = fit_profile(train, window=WINDOW, false_alarm_rate=0.01)
    return DriftWindow(references=profile.features, calibration=profile.calibration)


def _windows(tracker: DriftWindow, data: dict[str, np.ndarray]) -> list[tuple[str, ...]]:
    """Feed the data in batches of 50; the features that fired in each closed window."""
    fired = []
    n = len(next(iter(data.values())))
    for start in range(0, n, 50):
        tracker.add({k: v[start:start + 50] for k, v in data.items()})
        if tracker.full:
            fired.append(tuple(d.feature for d in tracker.close() if d.fired))
    return fired


def test_false_alarm_rate_on_held_out_rows_is_within_the_configured_rate() -> None:
    rng = np.random.default_rng(11)
    tracker = _fit(_table(rng, 20_000))
    fired = _windows(tracker, _table(rng, WINDOW * 600))
    alarms = sum(1 for f in fired if f)
    assert len(fired) == 600
    # 1% of 600 is 6; a binomial(600, 0.01) exceeds 13 with probability < 0.5%.
    assert alarms <= 13, alarms


def test_a_half_sigma_shift_in_one_feature_is_caught_within_two_windows() -> None:
    rng = np.random.default_rng(12)
    tracker = _fit(_table(rng, 20_000))
    fired = _windows(tracker, _table(rng, WINDOW * 2, shift=0.5))
    assert any("f0" in f for f in fired), fired
    assert all(set(f) <= {"f0"} for f in fired), fired


def test_a_new_dominant_category_is_caught() -> None:
    rng = np.random.default_rng(13)
    tracker = _fit(_table(rng, 20_000))
    fired = _windows(tracker, _table(rng, WINDOW, dominant="purple"))
    assert fired == [("colour",)], fired


def test_the_profile_is_reproducible_and_serialisable() -> None:
    rng = np.random.default_rng(14)
    train = _table(rng, 5_000)
    a = fit_profile(train, window=WINDOW)
    assert fit_profile(train, window=WINDOW) == a
    assert type(a).model_validate_json(a.model_dump_json()) == a
    assert set(a.features) == set(train) and a.features["colour"].kind == "category"
