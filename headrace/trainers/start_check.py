"""Whether training beat the model it started as: a regressor's ridge start
(``linear_start``), a text classifier's n-gram logistic regression (``ngram_start``).

Early stopping keeps the epoch with the least validation loss, and with few validation rows an
epoch can lead the start by noise alone: the network then ships a fit of that noise. The trained
model is kept only when it beats the start on the validation rows by more than one standard
error of the paired per-row difference in loss (squared error; a classifier's log loss: the
one-standard-error rule: between two models the data cannot tell apart, the simpler); otherwise
the job publishes its start, which predicts exactly what the start's linear model predicts.
Framework-free: the job loop saves the start's weights before the first epoch and asks this
with both models' validation predictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

TRAINED, START = "trained", "start"


@dataclass(frozen=True)
class StartCheck:
    gain: float  # the start's mean loss minus the trained model's (validation rows)
    se: float  # the standard error of that mean (paired, per row)
    rows: int
    loss: str = "mse"  # the per-row loss compared: "mse" or "log_loss"

    @property
    def kept(self) -> str:
        """What the job publishes: ``trained`` only when its gain exceeds one standard error."""
        return TRAINED if math.isfinite(self.gain) and self.gain > self.se else START

    def record(self) -> dict[str, Any]:
        return {"kept": self.kept, f"val_{self.loss}_gain": self.gain, "se": self.se,
                "rows": self.rows}


def _row_loss(y: np.ndarray, out: np.ndarray, classifier: bool) -> np.ndarray:
    if classifier:  # ``out``: class probabilities, ``y``: class indices
        p = np.asarray(out, np.float64).reshape(len(y), -1)
        picked = p[np.arange(len(y)), np.asarray(y, np.int64).reshape(-1)]
        return -np.log(np.clip(picked, 1e-12, 1.0))
    target = np.asarray(y, np.float64).reshape(len(y), -1)
    return ((np.asarray(out, np.float64).reshape(target.shape) - target) ** 2).mean(axis=1)


def compare(y: np.ndarray, start: np.ndarray, trained: np.ndarray, *,
            classifier: bool = False) -> StartCheck:
    """The trained model's gain over the start on the validation rows ``y``."""
    d = _row_loss(y, start, classifier) - _row_loss(y, trained, classifier)
    n = len(d)
    loss = "log_loss" if classifier else "mse"
    if n < 2:
        return StartCheck(math.nan, math.nan, n, loss)
    return StartCheck(float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n, loss)
