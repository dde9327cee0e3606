"""The default gate knows chance: models of shuffled labels are never promoted (20 seeds, 1-5
epochs, real MXNet jobs run in-process without a broker), nor is a model that never predicts a
class with >= 10 validation rows; a model that learned something is promoted."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.contracts import ModelSpec, Task, TrainRequested
from headrace.contracts.gates import DEFAULT_GATE
from headrace.store import versions
from headrace.trainers import jobs
from headrace.trainers.datasets import make_demo
from headrace.trainers.evaluation import baseline, evaluate
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.gate import check
from headrace.trainers.job_process import run_job


def _table(dfs: Path, seed: int, *, shuffle: bool) -> str:
    path = make_demo(out=dfs / "datasets" / f"t{seed}.parquet", rows=300, features=8, seed=seed)
    if shuffle:
        table = pq.read_table(path)
        labels = np.random.default_rng(seed).permutation(table.column("label").to_numpy())
        table = table.set_column(table.schema.get_field_index("label"), "label",
                                 pa.array(labels))
        pq.write_table(table, path)
    return f"datasets/t{seed}.parquet"


def _job(dfs: Path, uri: str, name: str, spec: ModelSpec) -> jobs.JobStatus:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name, framework="mxnet",
                         dataset_uri=uri, spec=spec)
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    return st


@pytest.mark.slow
def test_shuffled_labels_are_never_promoted_over_20_seeds_and_1_to_5_epochs(dfs: Path) -> None:
    for seed in range(20):
        spec = ModelSpec(epochs=1 + seed % 5, hidden=(16,), seed=seed)
        st = _job(dfs, _table(dfs, seed, shuffle=True), f"shuffled{seed}", spec)
        assert st.promoted is False and st.result == "refused", (seed, st)
        assert st.held_by == ["baseline"] and st.reason == "; ".join(st.gate_reasons)
        assert versions.read_alias(dfs, f"shuffled{seed}") is None


def test_real_labels_with_no_hyperparameters_are_promoted_with_their_curve(dfs: Path) -> None:
    st = _job(dfs, _table(dfs, 100, shuffle=False), "real", ModelSpec())
    assert st.promoted is True and st.result == "promoted" and st.reason is None
    mv = versions.load_version(dfs, "real", st.version or 0)
    training = mv.manifest.extra["training"]
    assert training["stopped_because"] in ("early_stopping", "max_epochs")
    assert 1 <= training["best_epoch"] <= training["epochs_run"] == len(training["epochs"])
    row = training["epochs"][training["best_epoch"] - 1]
    assert row["val_loss"] == min(r["val_loss"] for r in training["epochs"])
    assert {"loss", "val_loss", "val_accuracy", "learning_rate"} <= set(row)


def _probs(pred: np.ndarray, k: int, confidence: float = 0.8) -> np.ndarray:
    out = np.full((len(pred), k), (1 - confidence) / (k - 1), np.float32)
    out[np.arange(len(pred)), pred] = confidence
    return out


def test_a_model_that_never_predicts_a_class_with_10_validation_rows_is_refused() -> None:
    y = np.repeat([0, 1, 2], [60, 60, 12])
    pred = np.where(y == 2, 0, y)  # right on classes 0 and 1, never says 2
    classes = ("0", "1", "2")
    ev = evaluate(task=Task.CLASSIFIER, outputs=_probs(pred, 3), y=y, classes=classes)
    base = baseline(task=Task.CLASSIFIER, y_train=y, y_val=y, classes=classes)
    result = check(DEFAULT_GATE, ev, baseline=base)
    assert not result.passed and result.held_by == ["baseline"]
    assert result.reasons == ["baseline: class 2 has 12 validation rows and recall 0 (never "
                              "predicted correctly)"]
    # Nine rows of a class are too few to require it (min_class_rows 10).
    y9 = np.repeat([0, 1, 2], [60, 60, 9])
    ev9 = evaluate(task=Task.CLASSIFIER, outputs=_probs(np.where(y9 == 2, 0, y9), 3), y=y9,
                   classes=classes)
    assert check(DEFAULT_GATE, ev9, baseline=base).passed


def test_accuracy_must_beat_the_larger_of_majority_and_1_over_k_with_confidence() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 180)
    classes = tuple(str(i) for i in range(10))
    base = baseline(task=Task.CLASSIFIER, y_train=y, y_val=y, classes=classes)
    # 0.156 on 10 classes with 180 rows (the promoted model): not above 0.1 with 99%.
    pred = np.where(np.arange(180) < 28, y, (y + 1) % 10)
    ev = evaluate(task=Task.CLASSIFIER, outputs=_probs(pred, 10, 0.2), y=y, classes=classes)
    result = check(DEFAULT_GATE, ev, baseline=base)
    assert result.reasons[0].startswith("baseline: accuracy 0.1556 (28/180) is not above the "
                                        "trivial rate 0.1"), result.reasons
    assert "one-sided binomial p=" in result.reasons[0]
    # Uniform scores never beat the uniform predictor's log loss, whatever the argmax.
    pred = y.copy()
    ev = evaluate(task=Task.CLASSIFIER, outputs=_probs(pred, 10, 0.1), y=y, classes=classes)
    reasons = check(DEFAULT_GATE, ev, baseline=base).reasons
    assert any(r.startswith("baseline: log loss 2.3026 is not below the uniform predictor's "
                            "2.3026") for r in reasons), reasons
    ev = evaluate(task=Task.CLASSIFIER, outputs=_probs(pred, 10, 0.6), y=y, classes=classes)
    assert check(DEFAULT_GATE, ev, baseline=base).passed


def test_a_regressor_must_beat_the_mean_with_confidence() -> None:
    rng = np.random.default_rng(1)
    y = rng.normal(0.0, 1.0, 200)
    base = baseline(task=Task.REGRESSOR, y_train=y, y_val=y)
    noise = evaluate(task=Task.REGRESSOR, outputs=(y.mean() + rng.normal(0, 0.05, 200)), y=y)
    reasons = check(DEFAULT_GATE, noise, baseline=base).reasons
    assert any("one-sided paired t-test p=" in r and "200 validation rows" in r
               for r in reasons), reasons
    good = evaluate(task=Task.REGRESSOR, outputs=y + rng.normal(0, 0.5, 200), y=y)
    assert check(DEFAULT_GATE, good, baseline=base).passed
