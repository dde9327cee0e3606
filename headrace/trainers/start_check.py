"""Whether training beat the model a regressor started as: its ridge start (``linear_start``).

Early stopping keeps the epoch with the least validation loss, and with few validation rows an
epoch can lead ridge by noise alone: the network then ships a fit of that noise. The trained
model is kept only when it beats the start on the validation rows by more than one standard
error of the paired per-row difference in squared error (the one-standard-error rule: between
two models the data cannot tell apart, the simpler); otherwise the job publishes its start,
which predicts exactly what ridge predicts. Framework-free: the job loop saves the start's
weights before the first epoch and asks this with both models' validation predictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

TRAINED, START = "trained", "start"


@dataclass(frozen=True)
class StartCheck:
    gain: float  # the start's mean squared error minus the trained model's (validation rows)
    se: float  # the standard error of that mean (paired, per row)
    rows: int

    @property
    def kept(self) -> str:
        """What the job publishes: ``trained`` only when its gain exceeds one standard error."""
        return TRAINED if math.isfinite(self.gain) and self.gain > self.se else START

    def record(self) -> dict[str, Any]:
        return {"kept": self.kept, "val_mse_gain": self.gain, "se": self.se, "rows": self.rows}


def compare(y: np.ndarray, start: np.ndarray, trained: np.ndarray) -> StartCheck:
    """The trained model's gain over the start on the validation rows ``y``."""
    target = np.asarray(y, np.float64).reshape(len(y), -1)
    d = ((np.asarray(start, np.float64).reshape(target.shape) - target) ** 2
         - (np.asarray(trained, np.float64).reshape(target.shape) - target) ** 2).mean(axis=1)
    n = len(d)
    if n < 2:
        return StartCheck(math.nan, math.nan, n)
    return StartCheck(float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n)
