"""Does a model beat the trivial predictor by more than luck, on the validation rows?

Classifier (needs all three):

* accuracy above the trivial rate ``p0 = max(validation majority rate, 1/k)`` (plus the
  ``accuracy`` margin) with confidence: a one-sided exact binomial test of the correct count,
  p-value below ``alpha`` (0.01);
* every class with at least ``min_class_rows`` (10) validation rows has recall > 0;
* log loss below both the uniform predictor's (``log k``) and the class-frequency predictor's
  (training frequencies on the same rows), reduced by the ``loss`` margin.

Regressor: squared errors below the training mean's on the same rows with confidence (a
one-sided paired t-test, p below ``alpha``) and an RMSE at least the ``rmse`` margin below.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from scipy import stats  # type: ignore[import-untyped]

from headrace.trainers.evaluation import Evaluation


class Margin(Protocol):
    @property
    def alpha(self) -> float: ...
    @property
    def accuracy(self) -> float: ...
    @property
    def loss(self) -> float: ...
    @property
    def rmse(self) -> float: ...
    @property
    def min_class_rows(self) -> int: ...


def reasons(margin: Margin, new: Evaluation, base: Evaluation) -> list[str]:
    if new.confusion_matrix and new.classes:
        return _classifier(margin, new, base)
    if "rmse" in new.metrics and "rmse" in base.metrics:
        return _regressor(margin, new, base)
    return []


def _classifier(margin: Margin, new: Evaluation, base: Evaluation) -> list[str]:
    cm = np.asarray(new.confusion_matrix, dtype=np.int64)
    k, n = len(new.classes), int(cm.sum())
    if n == 0:
        return ["baseline: no validation rows to compare with chance"]
    support = cm.sum(axis=1)
    correct = int(np.trace(cm))
    majority = float(support.max()) / n
    p0 = min(max(majority, 1.0 / k) + margin.accuracy, 1.0)
    out: list[str] = []
    p = float(stats.binomtest(correct, n, p0, alternative="greater").pvalue) if p0 < 1 else 1.0
    if p >= margin.alpha:
        extra = f" + margin {margin.accuracy:.4f}" if margin.accuracy else ""
        out.append(f"baseline: accuracy {correct / n:.4f} ({correct}/{n}) is not above the "
                   f"trivial rate {p0:.4f} (max of validation majority {majority:.4f} and "
                   f"1/{k}{extra}) with confidence: one-sided binomial p={p:.3g} >= "
                   f"alpha {margin.alpha:g}")
    for i, name in enumerate(new.classes):
        if support[i] >= margin.min_class_rows and cm[i, i] == 0:
            out.append(f"baseline: class {name} has {int(support[i])} validation rows and "
                       f"recall 0 (never predicted correctly)")
    loss = new.metrics.get("loss")
    if loss is not None:
        uniform = math.log(k) if k > 1 else 0.0
        freq = base.metrics.get("loss", math.inf)
        need = min(uniform, freq) * (1 - margin.loss)
        if not loss < need:
            out.append(f"baseline: log loss {loss:.4f} is not below the uniform predictor's "
                       f"{uniform:.4f} and the class-frequency predictor's {freq:.4f} "
                       f"(needs < {need:.4f})")
    return out


def _regressor(margin: Margin, new: Evaluation, base: Evaluation) -> list[str]:
    rmse, b = new.metrics["rmse"], base.metrics["rmse"]
    out: list[str] = []
    need = b * (1 - margin.rmse)
    if not rmse <= need:
        out.append(f"baseline: rmse {rmse:.4f} does not beat the mean predictor's {b:.4f} by "
                   f"{margin.rmse:.0%} (needs <= {need:.4f})")
    a, z = new.squared_errors, base.squared_errors
    if a is not None and z is not None and len(a) == len(z) and len(a) >= 2:
        d = z - a  # > 0 where the model is closer than the mean
        p = float(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue) \
            if float(np.std(d)) > 0 else (0.0 if float(d.mean()) > 0 else 1.0)
        if not p < margin.alpha:
            out.append(f"baseline: squared errors are not below the mean predictor's with "
                       f"confidence: one-sided paired t-test p={p:.3g} >= alpha "
                       f"{margin.alpha:g} ({len(d)} validation rows)")
    return out
