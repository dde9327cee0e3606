"""A training job as an MLflow run: its parameters, a metric row an epoch, the gate's outcome
and reasons, and the published version logged as an MLflow model (``mlflow_logging``) and
registered under the same name with the Headrace version as a tag.

Optional by design: every call is retried (``mlflow_retries`` attempts, backoff doubling from
``BACKOFF_S``); when one still fails the run log says so once through ``warn`` (the job's log
and a LOG event on events.jobs) and goes quiet for the rest of the job. The job never fails for
MLflow.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from headrace.core.errors import HeadraceError
from headrace.imports import mlflow_logging
from headrace.imports.mlflow_rest import MlflowClient, MlflowUnavailable
from headrace.store.versions import ModelVersion
from headrace.trainers.run_log import RunLogSettings, Warn

log = logging.getLogger("headrace.job")
BACKOFF_S = 0.5
MAX_PARAMS = 100  # MLflow's log-batch limit
T = TypeVar("T")


class MlflowRunLog:
    def __init__(self, client: MlflowClient, *, experiment: str, retries: int, warn: Warn,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.experiment = experiment
        self.retries = retries
        self.warn = warn
        self.sleep = sleep
        self.run_id = ""
        self.artifact_uri = ""
        self.broken = False

    def _call(self, what: str, fn: Callable[[], T]) -> T | None:
        if self.broken:
            return None
        delay = BACKOFF_S
        for attempt in range(1, self.retries + 1):
            try:
                return fn()
            except MlflowUnavailable as exc:
                if attempt == self.retries:
                    self._give_up(what, exc, attempt)
                    return None
                self.sleep(delay)
                delay *= 2
            except HeadraceError as exc:  # refused: retrying cannot help
                self._give_up(what, exc, attempt)
                return None
            except Exception as exc:  # an answer it cannot read: MLflow never fails a job
                self._give_up(what, exc, attempt)
                return None
        return None

    def _give_up(self, what: str, exc: Exception, attempts: int) -> None:
        self.broken = True
        self.warn(f"MLflow: {what} failed after {attempts} attempt(s): "
                  f"{str(exc).splitlines()[0]}; the job goes on without MLflow")

    def started(self, *, job_id: str, model_name: str, params: Mapping[str, str]) -> None:
        def start() -> None:
            self.run_id, self.artifact_uri = mlflow_logging.create_run(
                self.client, experiment=self.experiment, name=job_id,
                tags={"headrace.job_id": job_id, "headrace.model": model_name})
            items = [{"key": k[:250], "value": str(v)[:6000]}
                     for k, v in sorted(params.items())][:MAX_PARAMS]
            if items:
                self.client.post("runs/log-batch", {"run_id": self.run_id, "params": items})
        self._call("starting the run", start)
        if self.run_id:
            log.info("MLflow run %s (experiment %s)", self.run_id, self.experiment)

    def epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        if not self.run_id:
            return
        now = mlflow_logging.now_ms()
        rows = [{"key": k, "value": float(v), "timestamp": now, "step": epoch}
                for k, v in sorted(metrics.items()) if math.isfinite(float(v))]
        if rows:
            self._call(f"logging epoch {epoch}", lambda: self.client.post(
                "runs/log-batch", {"run_id": self.run_id, "metrics": rows}))

    def published(self, mv: ModelVersion, *, gate: Mapping[str, Any], outcome: str) -> None:
        if not self.run_id:
            return
        reasons = "; ".join(str(r) for r in gate.get("reasons", ()))
        now = mlflow_logging.now_ms()

        def log_outcome() -> None:
            tags = {"headrace.version": str(mv.version), "headrace.outcome": outcome,
                    "headrace.gate.passed": str(bool(gate.get("passed"))).lower(),
                    "headrace.gate.reasons": reasons[:5000] or "-",
                    "headrace.manifest_sha256": mv.manifest_sha256}
            metrics = [{"key": f"final_{k}", "value": float(v), "timestamp": now, "step": 0}
                       for k, v in sorted(mv.manifest.metrics.items())
                       if math.isfinite(float(v))]
            metrics.append({"key": "gate_passed", "value": float(bool(gate.get("passed"))),
                            "timestamp": now, "step": 0})
            self.client.post("runs/log-batch", {
                "run_id": self.run_id, "metrics": metrics[:1000],
                "tags": [{"key": k, "value": v} for k, v in tags.items()]})

        # One call a step: a retry redoes only the step that failed (a second upload or a
        # second registered version after a slow answer would be a duplicate in MLflow).
        ref = f"{mv.name}:{mv.version}"
        self._call(f"logging {ref}'s outcome", log_outcome)
        uri = self._call(f"logging {ref}", lambda: mlflow_logging.log_version(
            self.client, mv, run_id=self.run_id, artifact_uri=self.artifact_uri))
        if uri is None:
            return
        number = self._call(f"registering {ref}", lambda: mlflow_logging.register(
            self.client, mv, model_uri=uri, run_id=self.run_id))
        self._call("ending the run", lambda: mlflow_logging.end_run(self.client, self.run_id))
        if number is not None and not self.broken:
            log.info("MLflow: %s logged in run %s, registered as %s version %s",
                     ref, self.run_id, mv.name, number)

    def failed(self, reason: str) -> None:
        if not self.run_id:
            return

        def fail() -> None:
            self.client.post("runs/set-tag", {"run_id": self.run_id, "key": "headrace.failure",
                                              "value": reason[:5000]})
            mlflow_logging.end_run(self.client, self.run_id, "FAILED")
        self._call("closing the failed run", fail)


def run_log(settings: RunLogSettings, warn: Warn) -> MlflowRunLog:
    """The factory ``trainers.run_log`` names."""
    assert settings.mlflow_tracking_uri
    return MlflowRunLog(MlflowClient.at(settings.mlflow_tracking_uri,
                                        timeout_s=settings.mlflow_timeout_s),
                        experiment=settings.mlflow_experiment, retries=settings.mlflow_retries,
                        warn=warn)
