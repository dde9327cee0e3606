"""The paired comparison's tests equal scipy's, and its counts equal an offline recount."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from headrace.rollout.comparison import binomial_tail, estimated_accuracy, mcnemar, wilson_interval
from headrace.rollout.tally import LiveTally


@pytest.mark.parametrize(("b", "c"), [(0, 0), (3, 9), (25, 12), (140, 170), (1, 60)])
def test_exact_mcnemar_equals_scipys_binomial_test(b: int, c: int) -> None:
    n = b + c
    two = 1.0 if n == 0 else stats.binomtest(c, n, 0.5, alternative="two-sided").pvalue
    greater = 1.0 if n == 0 else stats.binomtest(c, n, 0.5, alternative="greater").pvalue
    assert mcnemar(b, c) == pytest.approx(two, abs=1e-9)
    assert mcnemar(b, c, alternative="greater") == pytest.approx(greater, abs=1e-9)


def test_binomial_tail_for_other_probabilities() -> None:
    for k, n, p in [(3, 10, 0.2), (70, 100, 0.6), (0, 5, 0.3), (6, 5, 0.3)]:
        assert binomial_tail(k, n, p) == pytest.approx(stats.binom.sf(k - 1, n, p), abs=1e-12)


def test_wilson_interval_equals_scipys() -> None:
    ci = stats.binomtest(83, 120).proportion_ci(method="wilson")
    assert wilson_interval(83, 120) == pytest.approx((ci.low, ci.high), abs=1e-9)


def test_counts_equal_an_offline_recount_and_add_across_batches() -> None:
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 3, size=5000)
    prod = np.where(rng.random(5000) < 0.8, truth, rng.integers(0, 3, size=5000))
    cand = np.where(rng.random(5000) < 0.9, truth, rng.integers(0, 3, size=5000))
    known = np.where(rng.random(5000) < 0.7, truth, -1)
    cmp = LiveTally(3)
    for lo in range(0, 5000, 700):
        part = LiveTally(3)
        part.add_rows(prod[lo:lo + 700], cand[lo:lo + 700], known[lo:lo + 700])
        cmp.add(part)  # batches add up to the whole
    assert cmp.rows == 5000 and int(np.trace(cmp.matrix)) == int((prod == cand).sum())
    offline = np.zeros((3, 3), dtype=np.int64)
    for p, c in zip(prod, cand, strict=True):
        offline[p, c] += 1
    assert (cmp.matrix == offline).all()
    lab = known >= 0
    assert cmp.labelled == int(lab.sum())
    assert int(np.trace(cmp.production_truth)) == int((prod[lab] == truth[lab]).sum())
    assert cmp.only_candidate_right == int(((cand == truth) & (prod != truth) & lab).sum())
    acc, (lo, hi) = cmp.accuracy("candidate")
    assert lo < acc < hi and acc == pytest.approx(0.93, abs=0.02)
    assert cmp.mcnemar_p(alternative="greater") < 1e-6  # 0.9 vs 0.8 on ~3500 labelled


def test_cbpe_estimate_is_the_mean_top_probability() -> None:
    scores = np.array([[0.7, 0.2, 0.1], [0.4, 0.5, 0.1]])
    assert estimated_accuracy(scores) == pytest.approx(0.6)
