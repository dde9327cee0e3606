"""Pruning from inside a trial job: after each epoch the job's stop rules run (trainers.stopping;
this one is listed in trainers.stop_rules); for a tune trial this rule reports the epoch's
validation metric to the study's journal on the DFS and stops the job ("pruned") when the
study's pruner says the trial is not worth finishing.

Only single-worker trials get the rule: the pruner reads what other trials reported so far,
so two workers of a gang could decide differently. Pruning is an optimisation: if the study
cannot be read or written, the trial trains on (and says so in its log).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from headrace.contracts import TrainRequested, TriggerKind
from headrace.core.errors import HeadraceError
from headrace.core.settings import load_settings

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("headrace.job")
PRUNED = "pruned"


class PruneRule:
    """Reports ``val_<metric>`` per epoch to trial ``number`` of the study; stops when pruned."""

    def __init__(self, root: Path, study: str, number: int) -> None:
        self.root, self.study_name, self.number = root, study, number
        self._trial: optuna.Trial | None = None
        self._broken = False

    def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> str | None:
        if self._broken:
            return None
        try:
            trial, metric = self._open()
        except (HeadraceError, OSError, KeyError, ValueError, ImportError) as exc:
            self._broken = True
            log.warning("pruning off for this trial: study %s unreadable: %s",
                        self.study_name, exc)
            return None
        value = metrics.get(f"val_{metric}")
        if value is None:
            return None
        try:
            trial.report(float(value), epoch)
            prune = trial.should_prune()
        except (RuntimeError, ValueError, OSError) as exc:  # e.g. the trial was told already
            log.warning("pruning off for this trial: %s", exc)
            self._broken = True
            return None
        if prune:
            log.info("trial %d of study %s pruned after epoch %d (val_%s=%.4f)",
                     self.number, self.study_name, epoch, metric, value)
            return PRUNED
        return None

    def _open(self) -> tuple[optuna.Trial, str]:
        import optuna  # only a trial pays for it

        from headrace.trainers.tuning import storage

        config = storage.read_config(self.root, self.study_name)
        if config is None:
            raise KeyError(f"no {storage.CONFIG}")
        if self._trial is None:
            journal = storage.journal(self.root, self.study_name)
            study = storage.load_study(self.root, config, journal)
            trial_id = journal.get_trial_id_from_study_id_trial_number(
                journal.get_study_id_from_name(self.study_name), self.number)
            self._trial = optuna.Trial(study, trial_id)
        return self._trial, config.metric


def trial_of(request: TrainRequested) -> tuple[str, int] | None:
    """(study, trial number) of a tune trial's request, else None."""
    t = request.trigger
    if t.kind != TriggerKind.TUNE or t.slot is None or not t.slot.isdecimal():
        return None
    return t.source, int(t.slot)


def prune_rule(request: TrainRequested) -> PruneRule | None:
    found = trial_of(request)
    if found is None or request.resources.workers > 1:
        return None
    try:  # the factory sees only the request: the DFS root is the job process's setting
        root = load_settings().dfs_root
    except HeadraceError as exc:
        log.warning("pruning off for this trial: %s", exc)
        return None
    return PruneRule(root, *found)
