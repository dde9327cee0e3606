"""Job lifecycle events on ``events.jobs``."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from headrace.contracts.base import Contract, utcnow
from headrace.core.types import SafeName


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class JobEventKind(StrEnum):
    QUEUED = "queued"
    STARTED = "started"
    PROGRESS = "progress"
    LOG = "log"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
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
