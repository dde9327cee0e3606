"""Job lifecycle events on ``events.jobs``."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from headrace.contracts.base import Contract, new_id, utcnow
from headrace.core.types import SafeName


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"  # an operator asked (``CancelRequested``): nothing published


# A job in one of these states never changes again.
FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class JobEventKind(StrEnum):
    QUEUED = "queued"
    STARTED = "started"
    PROGRESS = "progress"
    LOG = "log"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DUPLICATE = "duplicate"


class JobEvent(Contract):
    SCHEMA: ClassVar[str] = "headrace.JobEvent"

    job_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    kind: JobEventKind
    ts: datetime = Field(default_factory=utcnow)
    model_name: SafeName | None = None
    attempt: int = Field(default=1, ge=1)
    message: str = Field(default="", max_length=16_384)
    epoch: int | None = None
    step: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    reason: str | None = Field(default=None, max_length=4096)
    request_id: str | None = None
    worker: int | None = Field(default=None, ge=0)  # the gang member's index (0: the chief)


class CancelRequested(Contract):
    """An operator's request to stop a job (``headrace jobs cancel``), on the control plane's
    request topic beside the train requests, keyed by the job id. A second one for the same job
    changes nothing: the first ends it, later ones are answered DUPLICATE."""

    SCHEMA: ClassVar[str] = "headrace.CancelRequested"

    event_id: str = Field(default_factory=new_id, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    job_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    requested_by: str = Field(min_length=1, max_length=256)
    reason: str = Field(default="", max_length=1024)
    ts: datetime = Field(default_factory=utcnow)
