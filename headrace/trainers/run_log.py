"""Where a training job's run is logged beside Headrace's own records: nowhere by default, or
an experiment tracker named by the settings (``HEADRACE_MLFLOW_TRACKING_URI``: MLflow, see
``headrace.imports.mlflow_tracking``).

A run log is optional: it never fails the job. Its implementation retries a call a few times,
then says so once (a warning in the job's log and events.jobs) and logs nothing more for the
job. Trackers are named ``module:factory`` and imported only when configured (the tracker's
module lives above the trainers, with the other MLflow code).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from headrace.core.errors import ConfigError
from headrace.core.validation import first_error
from headrace.store.versions import ModelVersion


class RunLog(Protocol):
    def started(self, *, job_id: str, model_name: str, params: Mapping[str, str]) -> None: ...

    def epoch(self, epoch: int, metrics: Mapping[str, float]) -> None: ...

    def published(self, mv: ModelVersion, *, gate: Mapping[str, Any], outcome: str) -> None: ...

    def failed(self, reason: str) -> None: ...


class NoRunLog:
    def started(self, *, job_id: str, model_name: str, params: Mapping[str, str]) -> None:
        return None

    def epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        return None

    def published(self, mv: ModelVersion, *, gate: Mapping[str, Any], outcome: str) -> None:
        return None

    def failed(self, reason: str) -> None:
        return None


class RunLogSettings(BaseSettings):
    """Read once by the job's entrypoint (``python -m headrace.trainers``)."""

    model_config = SettingsConfigDict(env_prefix="HEADRACE_", frozen=True, extra="ignore")

    mlflow_tracking_uri: str | None = Field(
        default=None, description="Log every training job as an MLflow run (and register its "
        "model) on this tracking server; unset: no MLflow.")
    mlflow_experiment: str = Field(default="headrace", min_length=1, max_length=500)
    mlflow_retries: int = Field(default=3, ge=1, le=20)
    mlflow_timeout_s: float = Field(default=10.0, gt=0, le=600)


def load_run_log_settings() -> RunLogSettings:
    """Read the environment once; ``ConfigError`` (one line) for an invalid value."""
    try:
        return RunLogSettings()
    except ValidationError as exc:
        raise ConfigError(f"invalid settings: {first_error(exc, root='settings')}") from None


TRACKERS = {"mlflow": "headrace.imports.mlflow_tracking:run_log"}
Warn = Callable[[str], None]


def run_log_for(settings: RunLogSettings | None, warn: Warn) -> RunLog:
    """The job's run log: MLflow's where a tracking URI is set, else one that does nothing."""
    if settings is None or not settings.mlflow_tracking_uri:
        return NoRunLog()
    module, _, factory = TRACKERS["mlflow"].partition(":")
    make: Callable[..., RunLog] = getattr(importlib.import_module(module), factory)
    return make(settings, warn)
