"""The MLflow run log against a server that is not there (a closed loopback port): each call
is retried with doubling backoff (a fake clock records it), the warning is said once, and
nothing more is tried for the job."""

from __future__ import annotations

import pytest

from headrace.core.ports import free_port
from headrace.imports.mlflow_rest import MlflowClient, MlflowRefused
from headrace.imports.mlflow_tracking import BACKOFF_S, MlflowRunLog, run_log
from headrace.trainers.run_log import NoRunLog, RunLogSettings, run_log_for


def test_a_down_server_is_retried_with_doubling_backoff_then_said_once() -> None:
    slept: list[float] = []
    warned: list[str] = []
    rl = MlflowRunLog(MlflowClient.at(f"http://127.0.0.1:{free_port()}", timeout_s=2),
                      experiment="e", retries=4, warn=warned.append, sleep=slept.append)
    rl.started(job_id="j1", model_name="m", params={"epochs": "3"})
    assert slept == [BACKOFF_S, 2 * BACKOFF_S, 4 * BACKOFF_S]
    assert len(warned) == 1 and "starting the run failed after 4 attempt(s)" in warned[0]
    assert "is unreachable" in warned[0] and rl.broken
    rl.epoch(1, {"loss": 1.0})
    rl.failed("boom")
    assert slept == [BACKOFF_S, 2 * BACKOFF_S, 4 * BACKOFF_S] and len(warned) == 1


def test_a_bad_tracking_uri_is_refused_in_one_line() -> None:
    with pytest.raises(MlflowRefused, match="expected http://HOST:PORT") as err:
        run_log(RunLogSettings(mlflow_tracking_uri="sqlite:///mlflow.db"), print)
    assert "\n" not in str(err.value)


def test_no_tracking_uri_is_no_run_log() -> None:
    assert isinstance(run_log_for(RunLogSettings(), print), NoRunLog)
    assert isinstance(run_log_for(None, print), NoRunLog)


def test_the_settings_come_from_the_headrace_names_only(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.delenv("HEADRACE_MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    monkeypatch.setenv("HEADRACE_MLFLOW_RETRIES", "5")
    s = RunLogSettings()
    assert s.mlflow_tracking_uri is None and s.mlflow_retries == 5
