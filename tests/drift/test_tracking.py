"""A version's tracker: a window closed short by the time bound reports but never alarms; the
state it persists resumes the window, its sequence and each feature's run."""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from headrace.contracts import DriftWindowState, parse
from headrace.drift.fitting import fit_profile
from headrace.drift.tracking import VersionTracker

WINDOW = 200


def _tracker(rng: np.random.Generator) -> VersionTracker:
    profile = fit_profile({"x": rng.normal(size=3000)}, window=WINDOW)
    return VersionTracker(stream="s", model_name="m", model_version=3, scope="p0",
                          profile=profile)


def _add(t: VersionTracker, x: np.ndarray, first: int) -> None:
    t.add({"x": x}, np.zeros(len(x), np.int32), np.arange(first, first + len(x)))


def test_a_window_closed_by_the_time_bound_reports_but_never_alarms() -> None:
    rng = np.random.default_rng(31)
    t = _tracker(rng)
    _add(t, rng.normal(3.0, 1.0, 50), 0)  # far off, but only a quarter of a window
    assert not t.due(now=t.opened_at + timedelta(seconds=59), time_bound_s=60)
    assert t.due(now=t.opened_at + timedelta(seconds=60), time_bound_s=60)
    assert t.close() == [] and t.last[0].fired and t.drifting == {} and t.seq == 1


def test_state_resumes_the_window_its_number_and_the_runs() -> None:
    rng = np.random.default_rng(32)
    a = _tracker(rng)
    _add(a, rng.normal(3.0, 1.0, WINDOW), 0)
    (first,) = a.close()
    assert first.drifting and first.consecutive == 1 and first.window == 1
    _add(a, rng.normal(3.0, 1.0, 120), WINDOW)
    state = parse(DriftWindowState, a.state().to_bytes())  # as the topic holds it
    b = _tracker(np.random.default_rng(32))
    b.resume(state)
    rest = rng.normal(3.0, 1.0, WINDOW - 120)
    _add(b, rest, WINDOW + 120)
    (second,) = b.close()
    assert (second.window, second.consecutive, second.rows) == (2, 2, WINDOW)
    assert [(r.first, r.last) for r in second.ranges] == [(WINDOW, 2 * WINDOW - 1)]
    assert second.live == list(second.live) and sum(second.live) == WINDOW

