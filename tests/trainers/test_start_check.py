"""A regressor that starts from ridge (trainers.linear_start) publishes the trained network only
when it beats that start on the validation rows by more than one standard error
(trainers.start_check); otherwise it publishes the start, which predicts what ridge predicts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from headrace.contracts import ModelSpec
from headrace.models import load
from headrace.store.dfs import job_dir
from headrace.trainers import start_check
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.inputs import FEATURES
from headrace.trainers.linear_start import ridge_loo
from headrace.trainers.start_check import START, TRAINED, StartCheck, compare
from tests.trainers.test_families import train


def test_only_a_gain_past_one_standard_error_keeps_the_trained_model() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(size=400)
    start = y + rng.normal(0, 1.0, 400)
    assert compare(y, start, y + rng.normal(0, 0.5, 400)).kept == TRAINED  # clearly better
    same = compare(y, start, start + rng.normal(0, 0.01, 400))  # a fit of noise
    assert same.kept == START and same.gain <= same.se
    assert compare(y, start, start * np.nan).kept == START  # a broken model is never kept
    check = compare(y[:1], start[:1], y[:1])
    assert check.kept == START and check.rows == 1  # one row tells nothing


def force_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every start check finds that training did not beat the start."""
    real = start_check.compare

    def not_beaten(y: np.ndarray, start: np.ndarray, trained: np.ndarray, *,
                   classifier: bool = False) -> StartCheck:
        got = real(y, start, trained, classifier=classifier)
        return StartCheck(gain=-abs(got.gain), se=got.se, rows=got.rows, loss=got.loss)

    monkeypatch.setattr(start_check, "compare", not_beaten)


def _csv(path: Path, x: np.ndarray, y: np.ndarray) -> Path:
    cols = {f"x{i}": pa.array(x[:, i]) for i in range(x.shape[1])}
    cols["label"] = pa.array(y)
    pcsv.write_csv(pa.table(cols), path)
    return path


def _published(dfs: Path, tmp_path: Path, framework: str, x: np.ndarray, y: np.ndarray
               ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Train with the defaults; (start_check, the published model's and ridge's predictions
    on the job's validation rows)."""
    uri = put_dataset(root=dfs, path=_csv(tmp_path / "d.csv", x, y)).uri
    mv = train(dfs, uri, framework, task="regressor")
    training = mv.manifest.extra["training"]
    assert training == json.loads(
        (job_dir(dfs, mv.manifest.job_id or "") / "history.json").read_text())
    spec = ModelSpec(task="regressor")
    sp = split(load_dataset(root=dfs, uri=uri, spec=spec), validation_split=spec.validation_split,
               seed=spec.seed)
    xt, xv = (np.asarray(s.columns[FEATURES], np.float64) for s in (sp.x_train, sp.x_val))
    mean, std = xt.mean(0), xt.std(0)
    coef, intercept, _ = ridge_loo((xt - mean) / std, sp.y_train.astype(np.float64))
    ridge = ((xv - mean) / std) @ coef + intercept
    rows = [{f"x{i}": float(v) for i, v in enumerate(r)} for r in xv]
    got = np.array([p["scores"][0] for p in load(f"m:{mv.version}", dfs_root=dfs).predict(rows)])
    return training["start_check"], got, ridge


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet", "torch"])
def test_when_training_did_not_beat_its_start_the_start_is_published_and_predicts_ridge(
        dfs: Path, tmp_path: Path, framework: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision forced (the rule is tested above): each framework's start weights, saved
    before the first epoch, load back over the trained ones and are what is published."""
    force_start(monkeypatch)
    rng = np.random.default_rng(11)
    x = rng.normal(size=(300, 6)) * np.array([0.01, 1, 100, 5, 0.3, 40])
    y = x @ np.array([30.0, 2, 0.01, -0.5, 4, 0.0]) + rng.normal(0, 2, 300) + 7
    check, got, ridge = _published(dfs, tmp_path, framework, x, y)
    assert check["kept"] == START, check
    np.testing.assert_allclose(got, ridge, rtol=1e-4, atol=1e-3)


def test_a_network_that_beats_ridge_clearly_is_published(dfs: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    x = rng.uniform(-2, 2, size=(600, 4))
    y = 10 * np.sin(x[:, 0] * x[:, 1]) + 5 * x[:, 2] ** 2 + x[:, 3] + rng.normal(0, 0.5, 600)
    check, got, ridge = _published(dfs, tmp_path, "torch", x, y)
    assert check["kept"] == TRAINED and check["val_mse_gain"] > check["se"] > 0, check
    assert np.mean((got - ridge) ** 2) > 1.0  # not ridge's predictions
