"""When training stops: rules asked after every epoch with that epoch's metrics.

Early stopping on validation loss comes first; the other rules (a tuner's pruning) are listed in
:mod:`headrace.trainers.stop_rules` and handed to the job by its entry point. The job loop (both
frameworks) calls every rule after each epoch with the keys of history.json (``loss``,
``val_loss``, ``val_accuracy``, ...), stops at the first reason, restores the best epoch's
weights and records ``stopped_because``. In a distributed
gang every worker asks the rules over the same metrics, so a rule must be deterministic there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from headrace.contracts import TrainRequested

EARLY_STOPPING = "early_stopping"
MAX_EPOCHS = "max_epochs"
DIVERGED = "diverged"


class StopRule(Protocol):
    def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> str | None:
        """A stop reason ("early_stopping", "pruned", ...) or None to go on."""


# ``factory(request)`` gives a rule for that job, or None when the rule does not apply to it.
StopRuleFactory = Callable[[TrainRequested], StopRule | None]


def rules_for(request: TrainRequested, factories: Iterable[StopRuleFactory]) -> list[StopRule]:
    """Early stopping first, then the rules of ``factories`` that apply, for one job."""
    rules: list[StopRule] = [EarlyStopping(request.spec.patience)]
    for factory in factories:
        rule = factory(request)
        if rule is not None:
            rules.append(rule)
    return rules


def better(loss: float, best: float) -> bool:
    """An improvement worth waiting for (a relative 1e-4, so noise in the last digits is not)."""
    if not math.isfinite(loss):
        return False
    return not math.isfinite(best) or loss < best - 1e-4 * max(1.0, abs(best))


class EarlyStopping:
    """Stop after ``patience`` epochs without a better ``val_loss``; at once on a NaN/inf loss."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.best = math.inf
        self.waited = 0

    def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> str | None:
        loss = metrics.get("val_loss", metrics.get("loss", math.nan))
        if not math.isfinite(loss):
            return DIVERGED
        if better(loss, self.best):
            self.best, self.waited = loss, 0
            return None
        self.waited += 1
        return EARLY_STOPPING if self.waited >= self.patience else None

    def replay(self, epochs: Sequence[Mapping[str, float]]) -> None:
        """Catch up on the epochs a resumed job already ran (history.json)."""
        for row in epochs:
            self.after_epoch(int(row["epoch"]), row)
