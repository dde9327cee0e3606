"""Every stop rule a training job asks after each epoch besides early stopping, listed here
(trainers.stopping is the seam). The job's entry points hand this list to the job runner,
which imports no rule's package: a new rule is one entry here, not an import for its side
effect. Importing the list imports no rule's library (Optuna loads inside a trial only).
"""

from __future__ import annotations

from headrace.trainers.stopping import StopRuleFactory
from headrace.trainers.tuning.pruning import prune_rule

FACTORIES: tuple[StopRuleFactory, ...] = (
    prune_rule,  # a tune trial stops when its study's pruner says so
)
