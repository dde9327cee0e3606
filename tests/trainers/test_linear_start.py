"""A tabular regressor starts from the training split's ridge solution (trainers.linear_start),
in every framework's mlp: the untrained model already predicts what ridge predicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.contracts import ModelSpec
from headrace.trainers.inputs import as_inputs, plan_for
from headrace.trainers.linear_start import ALPHAS, ridge_loo


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(120, 6)) * np.array([0.01, 1, 100, 5, 0.3, 40])
    y = x @ np.array([30.0, 2, 0.01, -0.5, 4, 0.0]) + rng.normal(0, 2, 120) + 7
    return x.astype(np.float32), y


def _loo_by_hand(z: np.ndarray, y: np.ndarray, alpha: float) -> float:
    errs = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        zk, yk = z[keep], y[keep]
        zm, ym = zk.mean(0), yk.mean()
        coef = np.linalg.solve((zk - zm).T @ (zk - zm) + alpha * np.eye(z.shape[1]),
                               (zk - zm).T @ (yk - ym))
        errs.append((y[i] - (ym + (z[i] - zm) @ coef)) ** 2)
    return float(np.mean(errs))


def test_the_penalty_is_the_one_with_the_least_leave_one_out_error() -> None:
    x, y = _data()
    z = (x - x.mean(0)) / x.std(0)
    coef, intercept, alpha = ridge_loo(z, y)
    by_hand = {a: _loo_by_hand(z, y, a) for a in ALPHAS}
    assert alpha == min(by_hand, key=lambda a: by_hand[a])
    zm = z.mean(0)
    want = np.linalg.solve((z - zm).T @ (z - zm) + alpha * np.eye(6), (z - zm).T @ (y - y.mean()))
    np.testing.assert_allclose(coef, want, rtol=1e-5, atol=1e-6)
    assert intercept == pytest.approx(y.mean() - zm @ want)


def _ridge_prediction(x: np.ndarray, y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    z = (x - x.mean(0)) / x.std(0)
    coef, intercept, _ = ridge_loo(z, y)
    return (((rows - x.mean(0)) / x.std(0)) @ coef + intercept).astype(np.float64)


def test_an_untrained_torch_regressor_predicts_what_ridge_predicts(tmp_path: Path) -> None:
    from headrace.trainers.backends.torch_nn import TorchModel

    x, y = _data()
    spec = ModelSpec.model_validate({"model": "mlp", "task": "regressor"})
    plan = plan_for(spec=spec, x_train=as_inputs(x), classes=(), root=tmp_path, y_train=y)
    assert plan.linear_start is not None
    model = TorchModel(spec, plan, seed=0)
    got = model.predict(as_inputs(x[:10])).reshape(-1)
    np.testing.assert_allclose(got, _ridge_prediction(x.astype(np.float64), y, x[:10]),
                               rtol=1e-4, atol=1e-3)


def test_a_classifier_and_a_text_plan_get_no_linear_start(tmp_path: Path) -> None:
    x, y = _data()
    spec = ModelSpec.model_validate({"model": "mlp"})
    plan = plan_for(spec=spec, x_train=as_inputs(x), classes=("a", "b"), root=tmp_path,
                    y_train=(y > 7).astype(np.int64))
    assert plan.linear_start is None
