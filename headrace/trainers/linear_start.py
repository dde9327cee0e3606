"""Where a regressor's linear term starts: the ridge solution of the training split.

Framework-free (NumPy): every backend's ``mlp`` regressor sets its linear term to these weights
and its deep output to zero, so the first epoch starts from ridge regression and the network
learns what ridge leaves over; early stopping with the best epoch restored then keeps a model
that is not worse than that start on the validation rows, give or take one epoch's drift.

The ridge is fitted on what the linear term sees (the standardised ``features`` input) against
the standardised label (the model outputs label units through ``plan.target``), its penalty
chosen from ``ALPHAS`` by exact leave-one-out error (the closed form scikit-learn's ``RidgeCV``
uses), so nothing is hand-set. Only tabular plans (the numeric matrix alone) get a start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headrace.codecs import codec
from headrace.codecs.stats import InputStats
from headrace.store.signature import ModelInput

ALPHAS = tuple(float(a) for a in np.logspace(-3, 3, 13))


@dataclass(frozen=True)
class LinearStart:
    """``y_std ≈ z @ weights + bias`` on the standardised features ``z``."""

    weights: np.ndarray  # float32 (features, outputs); a text family's: (ids, outputs)
    bias: np.ndarray  # float32 (outputs,)
    alpha: float
    kind: str = "ridge"  # what the start is, for the log (``ngram_start``: the text family's)


def ridge_loo(z: np.ndarray, y: np.ndarray, alphas: tuple[float, ...] = ALPHAS
              ) -> tuple[np.ndarray, float, float]:
    """(coefficients, intercept, alpha) of the ridge regression of ``y`` on ``z`` whose exact
    leave-one-out squared error is least (intercept unpenalised: ``z`` and ``y`` centred)."""
    zm, ym = z.mean(axis=0), y.mean()
    zc, yc = z - zm, y - ym
    u, s, vt = np.linalg.svd(zc, full_matrices=False)
    uty = u.T @ yc
    best: tuple[float, np.ndarray, float] | None = None
    for alpha in alphas:
        d = s / (s**2 + alpha)
        coef = vt.T @ (d * uty)
        # Hat matrix diagonal of the centred problem, plus the intercept's 1/n.
        h = np.sum(u**2 * (s**2 / (s**2 + alpha)), axis=1) + 1.0 / len(y)
        resid = yc - zc @ coef
        loo = float(np.mean((resid / np.maximum(1.0 - h, 1e-12)) ** 2))
        if best is None or loo < best[0]:
            best = (loo, coef, alpha)
    assert best is not None
    _, coef, alpha = best
    return coef, float(ym - zm @ coef), alpha


def ridge_start(inputs: tuple[ModelInput, ...], stats: dict[str, InputStats],
                columns: dict[str, np.ndarray], y: np.ndarray,
                target: tuple[float, float] | None) -> LinearStart | None:
    """The start of a tabular regressor (one numeric input with learned mean/std); None for
    anything else (categories, tensors, images, text: their layers start as they did)."""
    if target is None or len(inputs) != 1 or not codec(inputs[0].kind).tabular:
        return None  # the tabular matrix alone (its codec says), standardised by mean/std
    inp = inputs[0]
    st = stats.get(inp.name)
    x = columns.get(inp.name)
    if st is None or st.mean is None or st.std is None or x is None or len(x) < 2:
        return None
    z = (np.asarray(x, np.float64) - st.mean) / st.std
    ys = (np.asarray(y, np.float64).reshape(-1) - target[0]) / target[1]
    if not (np.isfinite(z).all() and np.isfinite(ys).all()):
        return None
    coef, intercept, alpha = ridge_loo(z, ys)
    return LinearStart(coef.astype(np.float32).reshape(-1, 1),
                       np.array([intercept], np.float32), alpha)
