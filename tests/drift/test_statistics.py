"""Each drift statistic equals its reference on fixed inputs to 1e-9: KS and chi-square against
scipy, PSI and Jensen-Shannon against implementations written here from their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.spatial import distance

from headrace.drift import statistics as st
from headrace.drift.profile import category_reference, numeric_reference

EXPECTED = np.array([0.1, 0.2, 0.3, 0.25, 0.15, 0.0])
COUNTS = np.array([12, 18, 35, 20, 10, 5])


def _psi_by_definition(e: list[float], c: list[int]) -> float:
    n = sum(c)
    total = 0.0
    for ei, ci in zip(e, c, strict=True):
        a = max(ci / n, 1e-4)
        ee = max(ei, 1e-4)
        total += (a - ee) * math.log(a / ee)
    return total


def _js_by_definition(e: list[float], c: list[int]) -> float:
    n = sum(c)
    a = [ci / n for ci in c]
    m = [(x + y) / 2 for x, y in zip(a, e, strict=True)]

    def kl(p: list[float], q: list[float]) -> float:
        return sum(pi * math.log2(pi / qi) for pi, qi in zip(p, q, strict=True) if pi > 0)

    return 0.5 * kl(a, m) + 0.5 * kl(e, m)


def test_psi_equals_its_definition() -> None:
    got = float(st.psi(EXPECTED, COUNTS))
    assert got == pytest.approx(_psi_by_definition(EXPECTED.tolist(), COUNTS.tolist()),
                                abs=1e-9, rel=0)
    assert float(st.psi(EXPECTED, np.round(EXPECTED * 1000).astype(int))) == pytest.approx(
        0.0, abs=1e-9)


def test_jensen_shannon_equals_its_definition_and_scipy() -> None:
    got = float(st.jensen_shannon(EXPECTED, COUNTS))
    assert got == pytest.approx(_js_by_definition(EXPECTED.tolist(), COUNTS.tolist()),
                                abs=1e-9, rel=0)
    # scipy's jensenshannon is the distance, the square root of the divergence.
    ref = distance.jensenshannon(COUNTS / COUNTS.sum(), EXPECTED, base=2) ** 2
    assert got == pytest.approx(ref, abs=1e-9, rel=0)


def test_chi_square_equals_scipy_where_every_expected_bin_is_populated() -> None:
    e = EXPECTED[:-1] / EXPECTED[:-1].sum()
    c = COUNTS[:-1]
    ref = stats.chisquare(c, f_exp=e * c.sum()).statistic
    assert float(st.chi_square(e, c)) == pytest.approx(ref, abs=1e-9, rel=0)


def test_chi_square_counts_an_unseen_bucket_instead_of_dividing_by_zero() -> None:
    got = float(st.chi_square(EXPECTED, COUNTS))
    seen = float(st.chi_square(EXPECTED[:-1], COUNTS[:-1] * 0 + COUNTS[:-1]))
    assert math.isfinite(got) and got > seen


def test_ks_equals_scipy_two_sample() -> None:
    rng = np.random.default_rng(7)
    ref = np.sort(rng.normal(size=800))
    live = rng.normal(0.3, 1.2, size=150)
    assert st.ks_statistic(ref, live) == pytest.approx(stats.ks_2samp(ref, live).statistic,
                                                       abs=1e-9, rel=0)
    # Ties (discrete values) too.
    ref_d = np.sort(rng.integers(0, 5, size=300).astype(float))
    live_d = rng.integers(0, 6, size=90).astype(float)
    assert st.ks_statistic(ref_d, live_d) == pytest.approx(
        stats.ks_2samp(ref_d, live_d).statistic, abs=1e-9, rel=0)


def test_ks_of_many_windows_in_one_sort_equals_one_at_a_time_ties_included() -> None:
    rng = np.random.default_rng(5)
    ref = np.sort(np.round(rng.normal(size=400), 1))
    windows = np.round(rng.normal(0.2, 1.0, size=(30, 120)), 1)
    together = st.ks_windows(ref, windows)
    for i, w in enumerate(windows):
        assert together[i] == pytest.approx(stats.ks_2samp(ref, w).statistic, abs=1e-9, rel=0)


def test_statistics_of_many_windows_equal_one_at_a_time() -> None:
    rng = np.random.default_rng(3)
    windows = rng.integers(0, 40, size=(5, EXPECTED.size))
    for name in ("psi", "chi_square", "jensen_shannon"):
        fn = getattr(st, name)
        together = fn(EXPECTED, windows)
        for i, w in enumerate(windows):
            assert together[i] == pytest.approx(float(fn(EXPECTED, w[None, :])[0]), abs=1e-12)


def test_numeric_reference_bins_hold_the_training_deciles_and_missing_values() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=10_000)
    x[:100] = np.nan
    ref = numeric_reference(x)
    assert len(ref.edges) == 9 and ref.bins == 11
    assert ref.expected[-1] == pytest.approx(0.01)  # the missing bucket
    assert all(p == pytest.approx(0.099, abs=0.002) for p in ref.expected[:-1])
    assert sum(ref.expected) == pytest.approx(1.0)
    assert list(ref.sample) == sorted(ref.sample) and len(ref.sample) == 1000


def test_category_reference_has_an_empty_unseen_bucket_that_live_values_fill() -> None:
    ref = category_reference(["a"] * 6 + ["b"] * 3 + ["c"])
    assert ref.values == ("a", "b", "c") and ref.expected == pytest.approx((0.6, 0.3, 0.1, 0.0))
    assert ref.bin_of(np.array(["b", "zzz", "a"], dtype=object)).tolist() == [1, 3, 0]
