"""The local executor: retriable failures retried with exponential backoff, permanent ones
never, a timeout kills the job, concurrency per framework holds."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.contracts import Framework
from headrace.store.dfs import job_dir
from headrace.trainers import jobs
from headrace.trainers.executors.base import (
    Executor,
    ExitCode,
    JobOutcome,
    JobSpec,
    is_retriable,
)
from headrace.trainers.executors.local import LocalExecutor
from headrace.trainers.job_process import LOCK
from tests.fixtures import eventually
from tests.trainers.conftest import TINY, request


def _spec(jid: str) -> JobSpec:
    return JobSpec(job_id=jid, model_name="demo", framework=Framework.MXNET)


def _run_until_done(ex: LocalExecutor, timeout: float = 90) -> list[JobOutcome]:
    out: list[JobOutcome] = []

    def finished() -> bool:
        out.extend(ex.poll())
        return not ex.active()

    eventually(finished, timeout_s=timeout, what="the executor's jobs to finish")
    return out


def test_backoff_doubles_up_to_its_cap() -> None:
    ex = LocalExecutor(root=Path("."), backoff_s=0.5, backoff_max_s=3.0)
    assert isinstance(ex, Executor)
    assert [ex.backoff(a) for a in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_retriable_failure_is_retried_after_backoff_and_then_succeeds(dfs: Path,
                                                                      demo: str) -> None:
    jid, _ = jobs.create_request(dfs, request(demo, spec=TINY))
    # Another holder of the job lock makes the first attempt exit 75 (retriable).
    fd = os.open(job_dir(dfs, jid) / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    retries: list[tuple[int, str, float]] = []
    ex = LocalExecutor(root=dfs, backoff_s=1.0, max_attempts=3,
                       on_retry=lambda j, a, r, d: retries.append((a, r, d)))
    ex.submit(_spec(jid))
    eventually(lambda: ex.poll() is not None and retries, timeout_s=30,
               what="the first attempt to be retried")
    os.close(fd)  # release: the retry can run
    outcomes = _run_until_done(ex)
    assert retries == [(2, f"job {jid} is running elsewhere (lock held)", 1.0)]
    assert [(o.succeeded, o.attempts) for o in outcomes] == [(True, 2)]
    log = jobs.log_path(dfs, jid).read_text()
    assert "--- attempt 1 ---" in log and "--- attempt 2 ---" in log


def test_a_permanent_failure_is_not_retried_and_says_why(dfs: Path) -> None:
    pq.write_table(pa.table({"f0": pa.array([{"a": 1}] * 20), "label": pa.array([0, 1] * 10)}),
                   dfs / "bad.parquet")
    jid, _ = jobs.create_request(dfs, request("bad.parquet"))
    ex = LocalExecutor(root=dfs, backoff_s=0.01, max_attempts=3)
    ex.submit(_spec(jid))
    [outcome] = _run_until_done(ex)
    assert not outcome.succeeded and outcome.attempts == 1
    assert outcome.exit_code == ExitCode.PERMANENT
    assert outcome.reason == ("dataset 'bad.parquet': feature columns must be numeric, "
                              "category, tensor, image or text: f0 (struct<a: int64>)")


def test_a_job_past_its_timeout_is_killed_and_given_up(dfs: Path, demo: str) -> None:
    # 500 epochs with early stopping off (patience = epochs): far longer than the timeout.
    long = TINY.model_copy(update={"epochs": 500, "patience": 500})
    jid, _ = jobs.create_request(dfs, request(demo, spec=long))
    ex = LocalExecutor(root=dfs, timeout_s=3.0, max_attempts=1, grace_s=1.0)
    ex.submit(_spec(jid))
    [outcome] = _run_until_done(ex)
    assert not outcome.succeeded
    assert outcome.reason == "timed out after 3s (gave up after 1 attempts)"


def test_a_job_with_invalid_settings_fails_permanently_and_is_not_retried(
        dfs: Path, demo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    jid, _ = jobs.create_request(dfs, request(demo, spec=TINY))
    monkeypatch.setenv("HEADRACE_PARTITIONS", "0")  # the job process inherits it
    ex = LocalExecutor(root=dfs, backoff_s=0.01, max_attempts=3,
                       on_retry=lambda *a: pytest.fail(f"retried: {a}"))
    ex.submit(_spec(jid))
    [outcome] = _run_until_done(ex)
    assert (outcome.succeeded, outcome.attempts, outcome.exit_code) == (
        False, 1, ExitCode.PERMANENT)
    assert "invalid settings: partitions" in outcome.reason
    # Its CLI twin exits 65 too, and a bare usage error (2) is never retried either.
    env = {**os.environ, "HEADRACE_DFS_ROOT": str(dfs), "HEADRACE_PARTITIONS": "0"}
    cli = subprocess.run([sys.executable, "-c", "from headrace.cli import main; main()",
                          "job", "run", jid], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == ExitCode.PERMANENT, cli.stderr
    assert cli.stderr.strip().splitlines()[-1].startswith("headrace job: invalid settings")
    assert not is_retriable(ExitCode.PERMANENT) and not is_retriable(ExitCode.USAGE)
    assert is_retriable(ExitCode.RETRIABLE) and is_retriable(1)
