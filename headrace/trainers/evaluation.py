"""Evaluation: metrics and a confusion matrix on the validation split, plus their PNG."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headrace.contracts import Task
from headrace.core.confusion_plot import Panel, render

# Metrics where lower is better; every other metric is higher-is-better.
LOWER_IS_BETTER = ("loss", "rmse", "mae")


def lower_is_better(metric: str) -> bool:
    return metric in LOWER_IS_BETTER


@dataclass(frozen=True)
class Evaluation:
    metrics: dict[str, float]
    confusion_matrix: list[list[int]] = field(default_factory=list)  # [true][predicted]
    classes: tuple[str, ...] = ()
    # A regressor's squared error per validation row (the gate's paired test); not saved.
    squared_errors: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> bytes:
        return json.dumps({"metrics": self.metrics, "confusion_matrix": self.confusion_matrix,
                           "classes": list(self.classes)}, indent=2, sort_keys=True).encode()


def evaluate(*, task: Task, outputs: np.ndarray, y: np.ndarray,
             classes: tuple[str, ...] = ()) -> Evaluation:
    if task == Task.CLASSIFIER:
        return _classifier(outputs, y.astype(np.int64), classes)
    return _regressor(outputs.reshape(-1), y.astype(np.float64))


def baseline(*, task: Task, y_train: np.ndarray, y_val: np.ndarray,
             classes: tuple[str, ...] = ()) -> Evaluation:
    """The trivial model on the validation rows, learned from the training split: a
    classifier's class frequencies (so it predicts the majority class) or a regressor's mean,
    the same for every row."""
    n = len(y_val)
    if task == Task.CLASSIFIER:
        k = len(classes)
        counts = np.bincount(y_train.astype(np.int64), minlength=k).astype(np.float64)
        priors = counts / max(1.0, counts.sum())
        probs = np.tile(priors.astype(np.float32), (n, 1))
        return _classifier(probs, y_val.astype(np.int64), classes)
    mean = float(np.mean(y_train)) if len(y_train) else 0.0
    return _regressor(np.full(n, mean), y_val.astype(np.float64))


def _classifier(probs: np.ndarray, y: np.ndarray, classes: tuple[str, ...]) -> Evaluation:
    k = len(classes)
    pred = probs.argmax(axis=1)
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (y, pred), 1)
    eps = 1e-7
    p_true = np.clip(probs[np.arange(len(y)), y], eps, 1.0)
    metrics: dict[str, float] = {
        "accuracy": float((pred == y).mean()) if len(y) else 0.0,
        "loss": float(-np.log(p_true).mean()) if len(y) else 0.0,
    }
    f1s = []
    for i, name in enumerate(classes):
        support = cm[i].sum()
        predicted = cm[:, i].sum()
        recall = cm[i, i] / support if support else 0.0
        precision = cm[i, i] / predicted if predicted else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        metrics[f"recall.{name}"] = float(recall)
        metrics[f"precision.{name}"] = float(precision)
        f1s.append(f1)
    metrics["macro_f1"] = float(np.mean(f1s)) if f1s else 0.0
    return Evaluation(metrics, cm.tolist(), classes)


def _regressor(pred: np.ndarray, y: np.ndarray) -> Evaluation:
    err = pred.astype(np.float64) - y
    var = float(np.var(y))
    mse = float(np.mean(err**2)) if len(y) else 0.0
    return Evaluation({
        "rmse": float(np.sqrt(mse)),
        "mae": float(np.mean(np.abs(err))) if len(y) else 0.0,
        "r2": float(1 - mse / var) if var > 0 else 0.0,
        "loss": mse,
    }, squared_errors=err**2)


def render_confusion_png(ev: Evaluation, path: Path, *, title: str) -> None:
    """The confusion matrix (truth vs predicted) as a PNG."""
    render([Panel(ev.confusion_matrix, title, "true", "predicted")], ev.classes, path)
