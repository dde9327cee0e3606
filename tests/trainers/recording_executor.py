"""Executors that record what the control plane asks of them, for tests where the executor is
not the point (it runs nothing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headrace.trainers.executors.base import JobOutcome, JobSpec


class RecordingExecutor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (what, job id), in order

    @property
    def submitted(self) -> list[str]:
        return [job_id for what, job_id in self.calls if what == "submit"]

    def submit(self, job: JobSpec) -> None:
        self.calls.append(("submit", job.job_id))

    def poll(self) -> list[JobOutcome]:
        return []

    def cancel(self, job_id: str) -> bool:
        return False

    def active(self) -> list[str]:
        return []

    def close(self) -> None:
        pass


class RecordingAdopter(RecordingExecutor):
    """An adopting executor: it adopts the jobs whose handle is a Kubernetes one."""

    def handle(self, job_id: str) -> dict[str, Any] | None:
        return None

    def adopt(self, job: JobSpec, handle: Mapping[str, Any]) -> bool:
        self.calls.append(("adopt", job.job_id))
        return handle.get("kind") == "kubernetes"

    def reap(self, job_id: str, handle: Mapping[str, Any]) -> None:
        self.calls.append(("reap", job_id))
