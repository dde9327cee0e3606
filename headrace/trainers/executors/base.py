"""The executor interface: the control plane hands it jobs, it reports how they end.

Contract (stable; the local and Kubernetes executors both implement it):

* The job's directory ``jobs/<job_id>/`` already holds ``request.json`` when ``submit`` is called.
* The process to run is :func:`job_command` -- it reads the request from the DFS, resumes from
  the last complete checkpoint, trains, evaluates, publishes and writes ``status.json``.
* Its exit code says what happened (:class:`ExitCode`): ``0`` success, ``65`` permanent failure
  (bad dataset, spec or configuration: never retried), ``2`` a usage or configuration error of
  the command line (never retried either), ``75`` retriable failure (retry with backoff); any
  other code (a crash, a signal, OOM kill) is treated as retriable.
* ``poll()`` returns the jobs that *ended* since the last call (each exactly once), after the
  executor's own retries are spent. Progress and log lines are published by the job itself.
* Optional callbacks an executor may offer (the local one does): ``on_start(job_id, attempt,
  pid)`` when a process/pod starts -- the control plane publishes STARTED from it -- and
  ``on_retry(job_id, next_attempt, reason, delay_s)`` before a retry (-> RETRYING).
* ``submit`` must be idempotent for a job id that is already running or queued.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol, runtime_checkable

from headrace.contracts import Framework, Resources


class ExitCode(IntEnum):
    OK = 0
    USAGE = 2  # the command line or its settings are invalid: a retry runs the same -- never
    PERMANENT = 65  # EX_DATAERR: bad dataset, bad spec, gate misconfiguration -- never retried
    RETRIABLE = 75  # EX_TEMPFAIL: DFS or broker hiccup -- retried with backoff


PERMANENT_EXIT_CODES = (int(ExitCode.PERMANENT), int(ExitCode.USAGE))


def is_retriable(code: int) -> bool:
    """Anything but success and a permanent failure (65, or 2 for a bad command line or
    settings) may succeed on a new attempt."""
    return code != ExitCode.OK and code not in PERMANENT_EXIT_CODES


@dataclass(frozen=True)
class JobSpec:
    """What an executor needs to start a job; the rest is in ``jobs/<job_id>/request.json``."""

    job_id: str
    model_name: str
    framework: Framework
    resources: Resources = field(default_factory=Resources)
    request_id: str | None = None  # the TrainRequested event id
    strategy: str = "auto"  # spec.strategy (distributed jobs)
    # Attempts made before this submit (a job resumed after a control-plane restart): the
    # next is numbered after them, and they count against the retry budget.
    attempts_done: int = 0


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended, reported once by ``poll``."""

    job_id: str
    succeeded: bool
    exit_code: int | None
    attempts: int
    reason: str = ""  # one line; empty on success


@runtime_checkable
class Executor(Protocol):
    """Runs jobs; never blocks the caller for the length of a job."""

    def submit(self, job: JobSpec) -> None:
        """Queue or start ``job``; a second submit of a known job id is a no-op."""

    def poll(self) -> list[JobOutcome]:
        """Advance the executor (start queued jobs, reap ended ones); return jobs that ended."""

    def cancel(self, job_id: str) -> bool:
        """Stop a queued or running job; return whether it was known."""

    def active(self) -> list[str]:
        """Job ids queued or running."""

    def close(self) -> None:
        """Stop every running job (SIGTERM, then SIGKILL after a grace period)."""


@runtime_checkable
class Adopting(Protocol):
    """An executor whose running jobs outlive the control plane: it names each job's handle
    (recorded in the job table), and after a restart adopts a handle or reaps it."""

    def handle(self, job_id: str) -> dict[str, Any] | None:
        """What identifies the job's running attempt (None: nothing runs)."""

    def adopt(self, job: JobSpec, handle: Mapping[str, Any]) -> bool:
        """Follow the attempt ``handle`` names instead of starting one; False: cannot."""

    def reap(self, job_id: str, handle: Mapping[str, Any]) -> None:
        """Stop and remove what ``handle`` names (it was not adopted); returns once gone."""


def job_command(job_id: str, *, python: str | None = None, topic_prefix: str = "") -> list[str]:
    """The argv that runs one job; a pod runs the same with its image's Python.

    The job reads ``HEADRACE_BOOTSTRAP`` and ``HEADRACE_DFS_ROOT`` from its environment.
    """
    argv = [python or sys.executable, "-m", "headrace.trainers", "run", job_id]
    return argv + (["--topic-prefix", topic_prefix] if topic_prefix else [])


def ps_node_command(*, python: str | None = None) -> list[str]:
    """The argv of a parameter-server scheduler or server (its role from ``DMLC_ROLE``)."""
    return [python or sys.executable, "-m", "headrace.trainers", "ps-node"]
