"""Model promotions and rollbacks on ``events.models``."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from headrace.contracts.base import Contract, utcnow
from headrace.core.types import Framework, SafeName, Task


class ModelAction(StrEnum):
    PROMOTED = "promoted"
    ROLLBACK = "rollback"


class ModelPublished(Contract):
    SCHEMA: ClassVar[str] = "headrace.ModelPublished"

    model_name: SafeName
    version: int = Field(ge=1)
    framework: Framework
    task: Task
    alias: SafeName = "production"
    path: str  # relative to the DFS root
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    metrics: dict[str, float] = Field(default_factory=dict)
    previous_version: int | None = None
    action: ModelAction = ModelAction.PROMOTED
    job_id: str | None = None
    # Why the alias moved (a canary's promotion or rollback says what it measured).
    reason: str | None = Field(default=None, max_length=2000)
    ts: datetime = Field(default_factory=utcnow)
