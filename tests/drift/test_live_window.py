"""The live window counts batches into fixed bins: its statistics equal those of the raw values
(KS in its binned form), and its counts survive a snapshot and restore."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from scipy.stats import ks_2samp

from headrace.drift import statistics as st
from headrace.drift.calibration import REPORTED, binned_statistic, window_statistics
from headrace.drift.fitting import fit_profile
from headrace.drift.profile import numeric_reference
from headrace.drift.summaries import ProfiledInput, input_features, prediction_features
from headrace.drift.windows import DriftWindow


def test_binned_ks_is_scipys_two_sample_ks_of_the_bin_indices_missing_left_out() -> None:
    rng = np.random.default_rng(3)
    train = np.round(rng.normal(size=2000), 1)  # ties on the edges too
    ref = numeric_reference(train)
    for shift in (0.0, 0.3, 1.0):
        live = np.round(rng.normal(shift, 1.0, size=150), 1)
        live[:5] = np.nan
        got = float(binned_statistic("ks", ref, ref.count(live)[None, :])[0])
        want = ks_2samp(ref.bin_of(train), ref.bin_of(live[~np.isnan(live)])).statistic
        assert abs(got - want) < 1e-9
    assert float(st.ks_binned(np.full(3, 1 / 3), np.zeros((1, 3)))[0]) == 0.0


def test_bins_by_comparisons_equal_a_binary_search_edges_missing_and_float32_included() -> None:
    rng = np.random.default_rng(6)
    ref = numeric_reference(rng.normal(size=5000))
    edges = np.asarray(ref.edges)
    x = np.concatenate([rng.normal(size=2000), edges, np.nextafter(edges, np.inf),
                        [-np.inf, np.inf, np.nan]])
    want = np.searchsorted(edges, x, side="left")
    want[np.isnan(x)] = len(edges) + 1
    np.testing.assert_array_equal(ref.bin_of(x), want)
    x32 = x.astype(np.float32)
    want32 = np.searchsorted(edges, x32.astype(np.float64), side="left")
    want32[np.isnan(x32)] = len(edges) + 1
    np.testing.assert_array_equal(ref.bin_of(x32), want32)


def _table(rng: np.random.Generator, n: int, shift: float = 0.0) -> dict[str, np.ndarray]:
    return {"a": rng.normal(shift, 1.0, n), "b": rng.exponential(2.0, n),
            "c": rng.choice(["x", "y", "z"], n, p=[0.6, 0.3, 0.1]).astype(object)}


def test_counted_window_statistics_equal_those_of_the_raw_values() -> None:
    rng = np.random.default_rng(4)
    profile = fit_profile(_table(rng, 2000), window=300)
    window = DriftWindow(profile.features, profile.calibration)
    batches = [_table(rng, 100, shift=0.2) for _ in range(3)]
    for b in batches:
        window.add(b)
    assert window.full and window.rows == 300
    got = {d.feature: d.statistics for d in window.close()}
    for name, ref in profile.features.items():
        values = np.concatenate([b[name] for b in batches])
        want = window_statistics(ref, values, names=REPORTED[ref.kind])
        for stat, v in want.items():
            assert abs(got[name][stat] - v) < 1e-12, (name, stat)
    assert window.rows == 0 and window.statistics() == []


def test_an_open_window_resumes_from_its_snapshot() -> None:
    rng = np.random.default_rng(5)
    profile = fit_profile(_table(rng, 2000), window=300)
    first = DriftWindow(profile.features, profile.calibration)
    first.add(_table(rng, 120, shift=0.5))
    resumed = DriftWindow(profile.features, profile.calibration)
    resumed.restore(first.snapshot(), first.rows)
    more = _table(rng, 180)
    first.add(more)
    resumed.add(more)
    assert resumed.rows == first.rows == 300
    assert resumed.close() == first.close()


def test_summaries_give_image_brightness_and_text_token_features() -> None:
    images = np.stack([np.full((4, 4, 3), 10.0), np.full((4, 4, 3), 200.0)]).astype(np.float32)
    images[1, 0, 0, 0] = 0.0
    texts = np.array(["the cat sat", "zebra qux the", ""], dtype=object)

    def tokenize(values: np.ndarray) -> pa.ListArray:
        out: pa.ListArray = pa.compute.ascii_split_whitespace(pa.array(values, pa.string()))
        return out

    inputs = (ProfiledInput(name="img", kind="image"),
              ProfiledInput(name="t", kind="text", vocabulary=("the", "cat", "sat")))
    f = input_features(inputs[:1], {"img": images})
    np.testing.assert_allclose(f["img:brightness"], [10.0, images[1].mean(dtype=np.float64)])
    np.testing.assert_allclose(f["img:contrast"], [0.0, images[1].std(dtype=np.float64)])
    t = input_features(inputs[1:], {"t": texts}, tokenize=tokenize)
    np.testing.assert_allclose(t["t:tokens"], [3, 3, 0])
    np.testing.assert_allclose(t["t:unknown"], [0.0, 2 / 3, 0.0])
    p = prediction_features(np.array([[0.2, 0.8], [0.9, 0.1]]), ("no", "yes"))
    assert list(p["prediction:class"]) == ["yes", "no"]
    np.testing.assert_allclose(p["prediction:score"], [0.8, 0.9])
