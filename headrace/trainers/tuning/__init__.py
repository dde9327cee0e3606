"""Hyperparameter search as jobs (``headrace tune``): an Optuna study whose journal lives on
the DFS and whose every trial is an ordinary training job (trigger ``tune``).

Names are loaded on first use: every job process imports ``tuning.pruning`` (its stop rule is
listed in trainers.stop_rules) and must not pay for Optuna unless it is a trial.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {"Space": "space", "parse_space": "space", "StudyConfig": "storage",
          "StudyResult": "study", "TrialRow": "study", "check_study": "study",
          "run_study": "study", "show_study": "study", "trial_key": "study",
          "trial_request": "study"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = ["Space", "StudyConfig", "StudyResult", "TrialRow", "check_study", "parse_space",
           "run_study", "show_study", "trial_key", "trial_request"]
