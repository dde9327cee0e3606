"""Hyperparameter search as jobs (``headrace tune``): an Optuna study whose journal lives on
the DFS and whose every trial is an ordinary training job (trigger ``tune``)."""

from headrace.trainers.tuning.space import Space, parse_space
from headrace.trainers.tuning.storage import StudyConfig
from headrace.trainers.tuning.study import (
    StudyResult,
    TrialRow,
    check_study,
    run_study,
    show_study,
    trial_key,
    trial_request,
)

__all__ = ["Space", "StudyConfig", "StudyResult", "TrialRow", "check_study", "parse_space",
           "run_study", "show_study", "trial_key", "trial_request"]
