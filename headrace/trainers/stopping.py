"""Rules that end training early: after each epoch the job loop asks every rule; the first one
to give a reason ("early_stopping", "pruned", ...) stops training.

The seam agreed between helpers (seams.md): early stopping comes first, then every factory
registered with :func:`register` (a tuning study's pruner, say). In a distributed gang every
worker must reach the same decision, so a rule there must be deterministic over the metrics.

This minimal version holds only the registry; the training loop's early stopping is added
beside it by the training work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from headrace.contracts import TrainRequested


class StopRule(Protocol):
    def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> str | None:
        """A stop reason, or None to go on."""
        ...


StopRuleFactory = Callable[[TrainRequested], StopRule | None]
_FACTORIES: list[StopRuleFactory] = []


def register(factory: StopRuleFactory) -> StopRuleFactory:
    """Decorator: ``factory`` is asked for a rule for every job (None: no rule for this one)."""
    if factory not in _FACTORIES:
        _FACTORIES.append(factory)
    return factory


def rules_for(request: TrainRequested) -> list[StopRule]:
    """The rules of one job, in order."""
    return [rule for rule in (f(request) for f in _FACTORIES) if rule is not None]
