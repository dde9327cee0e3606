"""Replay progress on the DFS: ``ops/replays/<replay_id>.json``, one file per replay.

Protocol (numbered, as in the replay loop):

1. Produce a slice of the range.
2. Flush: wait until every produced record is acknowledged.
3. Only then write the checkpoint (atomically: temp file, fsync, rename) with ``next`` per
   partition and ``scan_from``: the target offset after the last acknowledged record.

A crash between 2 and 3 leaves records in the target that the checkpoint does not know about.
On resume, the target is read from ``scan_from`` for records carrying this replay's id; the
highest origin offset found moves ``next`` past them, so a resume never duplicates.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.naming import check_name, confined
from headrace.store.dfs import write_atomic


class PartitionProgress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partition: int = Field(ge=0)
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    next: int = Field(ge=0)  # next source offset to replay
    scan_from: int = Field(default=0, ge=0)  # target offset a resume scan starts at

    @property
    def remaining(self) -> int:
        return max(0, self.end - self.next)


class ReplayCheckpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replay_id: str
    source: str
    target: str
    mode: Literal["copy", "rescore"] = "copy"
    model: str | None = None  # NAME:VERSION for a re-score
    runtime: str = "tensorflow"  # the scorer runtime a re-score runs on (a resume keeps it)
    rate: float | None = None
    keep_timestamps: bool = False
    status: Literal["running", "completed"] = "running"
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    records_out: int = 0
    partitions: list[PartitionProgress]

    @property
    def remaining(self) -> int:
        return sum(p.remaining for p in self.partitions)


def new_replay_id() -> str:
    return f"replay-{datetime.now(UTC):%Y%m%dt%H%M%S}-{uuid.uuid4().hex[:8]}"


def checkpoint_path(root: Path, replay_id: str) -> Path:
    return confined(root, "ops", "replays", f"{check_name(replay_id, what='replay id')}.json")


def save(root: Path, cp: ReplayCheckpoint) -> None:
    cp.updated_at = datetime.now(UTC)
    write_atomic(checkpoint_path(root, cp.replay_id), cp.model_dump_json(indent=2).encode())


def load(root: Path, replay_id: str) -> ReplayCheckpoint:
    path = checkpoint_path(root, replay_id)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ValidationFailed(f"no replay {replay_id} (no checkpoint at {path})") from None
    try:
        return ReplayCheckpoint.model_validate_json(raw)
    except ValidationError as exc:
        raise PermanentError(f"checkpoint {path} is unreadable: {exc.errors()[0]['msg']}") from None
