"""The learning-rate schedule and the batch size a job trains with when none is given."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from headrace.contracts import ModelSpec
from headrace.trainers.stopping import better

MIN_STEPS_PER_EPOCH = 32  # fewer and a small dataset learns little per epoch
LARGEST_BATCH, SMALLEST_BATCH = 256, 16


def batch_size(spec: ModelSpec, rows: int, workers: int = 1) -> int:
    """The given batch size, else the largest power of two in 16..256 that still makes
    ``MIN_STEPS_PER_EPOCH`` steps per epoch; never more than the training rows, never fewer
    than one row per worker."""
    if spec.batch_size is not None:
        return max(1, min(spec.batch_size, rows))
    bs = LARGEST_BATCH
    while bs > SMALLEST_BATCH and rows / bs < MIN_STEPS_PER_EPOCH:
        bs //= 2
    return max(1, min(max(bs, workers), rows))


class LearningRate:
    """``plateau``: halve the rate after ``max(1, patience // 2)`` epochs without a
    better validation loss (down to 1/1000 of the start); ``constant``: never change it.
    Deterministic from the validation losses, so a resumed job and every worker of a gang
    agree on it."""

    def __init__(self, spec: ModelSpec) -> None:
        self.start = self.rate = spec.learning_rate
        self.on = spec.lr_schedule == "plateau"
        self.wait = max(1, spec.patience // 2)
        self.best = math.inf
        self.waited = 0

    def after_epoch(self, metrics: Mapping[str, float]) -> float:
        """The rate for the next epoch."""
        loss = metrics.get("val_loss", math.nan)
        if better(loss, self.best):
            self.best, self.waited = loss, 0
        elif self.on:
            self.waited += 1
            if self.waited >= self.wait:
                self.rate = max(self.rate / 2, self.start / 1000)
                self.waited = 0
        return self.rate

    def replay(self, epochs: Sequence[Mapping[str, float]]) -> float:
        for row in epochs:
            self.after_epoch(row)
        return self.rate
