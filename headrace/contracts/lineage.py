"""The lineage index on ``control.lineage`` (compacted): which model version, in which role,
scored which offsets of a data-topic partition.

One ``LineageRange`` per run of records a (model, version, role) scored in one partition. The
scorer re-publishes the open range (same key: its first offset) with each batch, so the topic
keeps one record per range once compacted, and the range's end is as durable as the batch's
predictions. ``records`` counts the records scored inside ``first..last``: fewer than the
offsets when some were dead-lettered, routed to the other role (canary) or were transaction
markers.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from headrace.contracts.base import Contract, utcnow
from headrace.contracts.rollout import RolloutRole
from headrace.core.types import SafeName


class LineageRange(Contract):
    SCHEMA: ClassVar[str] = "headrace.LineageRange"

    stream: SafeName
    topic: str = Field(min_length=1, max_length=249)  # the data topic
    partition: int = Field(ge=0)
    model_name: SafeName
    version: int = Field(ge=1)
    role: RolloutRole
    first: int = Field(ge=0)  # first offset scored
    last: int = Field(ge=0)  # last offset scored (inclusive)
    records: int = Field(default=0, ge=0)
    ts: datetime = Field(default_factory=utcnow)

    def key(self) -> bytes:
        return (f"{self.stream}|{self.partition}|{self.first}|{self.model_name}|{self.version}|"
                f"{self.role.value}").encode()

    def holds(self, offset: int) -> bool:
        return self.first <= offset <= self.last
