"""A study on the DFS: ``studies/<name>/study.json`` (what the study searches, written once)
and ``studies/<name>/journal.log`` (Optuna's journal: every trial, parameter and reported value).

The journal is an append-only file with a lock beside it, so the tune command and every trial
job (a local process or a pod mounting the same DFS) share one study.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from headrace.contracts import ModelSpec
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.naming import check_name, confined
from headrace.core.types import Framework, SafeName, Task
from headrace.store.dfs import write_atomic
from headrace.trainers.evaluation import lower_is_better
from headrace.trainers.tuning.space import spec_value

STUDIES = "studies"
CONFIG = "study.json"
JOURNAL = "journal.log"
RUNNER_LOCK = ".runner.lock"
Pruner = Literal["median", "hyperband", "none"]
# The validation metrics a job's evaluation reports (trainers.evaluation), by task.
METRICS = {Task.CLASSIFIER: ("loss", "accuracy", "macro_f1"),
           Task.REGRESSOR: ("loss", "rmse", "mae", "r2")}


class StudyConfig(BaseModel):
    """What a study searches; a resumed study must search the same thing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: SafeName
    model_name: SafeName
    framework: Framework
    dataset_uri: str = Field(min_length=1, max_length=1024)
    model: str = "mlp"  # the family
    task: Task = Task.CLASSIFIER
    label: str = "label"
    epochs: int = Field(default=5, ge=1, le=10_000)
    space: str  # the --space text (tuning.space grammar)
    params: dict[str, object] = Field(default_factory=dict)  # fixed family hyperparameters
    metric: str = "loss"  # a validation metric the job's status.json holds
    pruner: Pruner = "median"
    seed: int = 0

    @model_validator(mode="after")
    def _known_metric(self) -> StudyConfig:
        if self.metric not in METRICS[self.task]:
            raise ValueError(f"metric {self.metric!r}: a {self.task.value} reports "
                             f"{', '.join(METRICS[self.task])}")
        return self

    @field_validator("params")
    @classmethod
    def _normalised(cls, value: dict[str, object]) -> dict[str, object]:
        # "16" from the command line and [16] from Python are the same search.
        try:
            value = {k: spec_value(k, v) for k, v in value.items()}
            spec = ModelSpec.model_validate(value)
        except (ValidationError, ValidationFailed):
            return value  # refused with its reason when the first trial's request is checked
        return spec.model_dump(mode="json", include=set(value))

    @property
    def direction(self) -> Literal["minimize", "maximize"]:
        return "minimize" if lower_is_better(self.metric) else "maximize"

    @property
    def patience(self) -> int:
        """The trials' early-stopping patience: a fixed ``patience`` param or the default."""
        fixed = self.params.get("patience")
        default: int = ModelSpec.model_fields["patience"].default
        return fixed if isinstance(fixed, int) and fixed > 0 else default

    def same_search(self, other: StudyConfig) -> bool:
        return self.model_dump() == other.model_dump()


def study_dir(root: Path, name: str) -> Path:
    return confined(root, STUDIES, check_name(name, what="study name"))


def write_config(root: Path, config: StudyConfig) -> StudyConfig:
    """Record ``config`` for a new study; for an existing one, check it is the same search and
    return the recorded one."""
    existing = read_config(root, config.name)
    if existing is not None:
        if not existing.same_search(config):
            raise PermanentError(f"study {config.name} exists with other settings (see "
                                 f"`headrace tune show {config.name}`): use another name")
        return existing
    d = study_dir(root, config.name)
    d.mkdir(parents=True, exist_ok=True)
    write_atomic(d / CONFIG, config.model_dump_json(indent=2).encode())
    return config


def read_config(root: Path, name: str) -> StudyConfig | None:
    path = study_dir(root, name) / CONFIG
    try:
        return StudyConfig.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        raise ValidationFailed(f"study {name}: {CONFIG} unreadable: "
                               f"{exc.errors()[0]['msg']}") from None


@contextmanager
def runner_lock(root: Path, name: str) -> Iterator[None]:
    """One ``headrace tune`` process drives a study at a time (trial jobs only report)."""
    fd = os.open(study_dir(root, name) / RUNNER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PermanentError(f"study {name} is being run by another `headrace tune` "
                                 "(its lock is held); `headrace tune show` follows it") from None
        yield
    finally:
        os.close(fd)


def journal(root: Path, name: str) -> JournalStorage:
    """The study's Optuna storage (the journal file on the DFS)."""
    path = str(study_dir(root, name) / JOURNAL)
    # An open(O_EXCL) lock file works on NFS and other shared filesystems (flock may not).
    return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))


# Trials whose values Optuna's sampler draws at random before it models the study: the median
# pruner waits for as many finished trials (a median of two is one trial's luck).
STARTUP_TRIALS = 4


def make_pruner(kind: Pruner, *, patience: int) -> optuna.pruners.BasePruner:
    """``patience``: the trials' early-stopping patience (epochs). The median pruner judges a
    trial only from that epoch on (epochs count from 1), and only against two or more finished
    trials at the same epoch: early epochs rank slow starters (a low learning rate, a large
    batch, the plateau schedule not yet cut) below fast ones they end up beating."""
    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=STARTUP_TRIALS,
                                           n_warmup_steps=patience, n_min_trials=2)
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1)
    return optuna.pruners.NopPruner()


def load_study(root: Path, config: StudyConfig,
               storage: JournalStorage | None = None) -> optuna.Study:
    """The study (created on first use), with the config's pruner and a seeded sampler."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=config.name, storage=storage or journal(root, config.name),
        load_if_exists=True,
        direction=config.direction,
        pruner=make_pruner(config.pruner, patience=config.patience),
        sampler=optuna.samplers.TPESampler(seed=config.seed, n_startup_trials=STARTUP_TRIALS))
