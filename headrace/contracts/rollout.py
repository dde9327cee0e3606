"""Rollout state and live evidence.

``RolloutState`` on ``control.rollout`` (compacted, keyed by stream): which candidate a stream's
scorers run beside production, as a shadow or a canary. Every scorer replica follows it, so all
of them (and a restarted one) agree.

``LiveCounts`` on ``control.rollout.live`` (compacted, keyed by ``key()``): one scorer
partition's running comparison of a (production, candidate) pair, with the data-topic offset it
covers up to, so a restarted scorer neither loses nor double-counts a record. Summing the latest
record of every partition gives the stream's comparison (``headrace models compare``, the live
gate, the dashboard).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from headrace.contracts.base import Contract, utcnow
from headrace.core.types import SafeName


class RolloutRole(StrEnum):
    PRODUCTION = "production"
    SHADOW = "shadow"
    CANARY = "canary"


class Canary(Contract):
    percent: float = Field(ge=0.0, le=100.0)
    steps: list[float] = Field(default_factory=list)  # the next percents, in order
    min_records: int = Field(default=1000, ge=0)  # candidate records before the next step
    min_labelled: int = Field(default=0, ge=0)  # and labelled ones, when required
    salt: str = Field(min_length=1, max_length=64)
    # Rollback when the candidate is worse than production by more than these margins.
    max_error_rate_margin: float = Field(default=0.01, ge=0.0, le=1.0)
    max_accuracy_drop: float | None = Field(default=None, ge=0.0, le=1.0)


class RolloutState(Contract):
    SCHEMA: ClassVar[str] = "headrace.RolloutState"

    stream: SafeName
    model_name: SafeName
    candidate_version: int | None = Field(default=None, ge=1)  # None: no rollout
    role: RolloutRole | None = None  # SHADOW or CANARY when a candidate is set
    canary: Canary | None = None
    reason: str = Field(default="", max_length=2000)
    ts: datetime = Field(default_factory=utcnow)

    def key(self) -> bytes:
        return self.stream.encode()


class LiveCounts(Contract):
    SCHEMA: ClassVar[str] = "headrace.LiveCounts"

    stream: SafeName
    model_name: SafeName
    production_version: int = Field(ge=1)
    candidate_version: int = Field(ge=1)
    role: RolloutRole
    partition: int = Field(ge=0)
    next_offset: int = Field(ge=0)  # every record of the partition before it is counted
    classes: list[str]
    rows: int = Field(default=0, ge=0)
    # matrix[i][j]: records production called class i and the candidate class j.
    matrix: list[list[int]]
    candidate_errors: int = Field(default=0, ge=0)  # rows the candidate failed on or dropped
    production_errors: int = Field(default=0, ge=0)
    # Sums of the top-class probability (CBPE's estimate before labels).
    production_confidence: float = 0.0
    candidate_confidence: float = 0.0
    # With labels: confusion of each version against the truth (truth i, predicted j). In a
    # canary the versions score disjoint keys: each matrix holds its own arm's records,
    # ``labelled`` both arms', and ``rows``, ``matrix`` and the McNemar counts stay 0 (nothing
    # is paired).
    labelled: int = Field(default=0, ge=0)
    production_truth: list[list[int]] = Field(default_factory=list)
    candidate_truth: list[list[int]] = Field(default_factory=list)
    # The labelled records only one version got right (McNemar's b and c): the paired test
    # needs them and the two truth matrices alone cannot give them.
    only_production_right: int = Field(default=0, ge=0)
    only_candidate_right: int = Field(default=0, ge=0)
    ts: datetime = Field(default_factory=utcnow)

    # The fields that add up across partitions and replicas (``rollout.tally``): integers
    # and sums of probabilities, and the square matrices (class by class).
    SUMMED: ClassVar[tuple[str, ...]] = (
        "rows", "candidate_errors", "production_errors", "production_confidence",
        "candidate_confidence", "labelled", "only_production_right", "only_candidate_right")
    MATRICES: ClassVar[tuple[str, ...]] = ("matrix", "production_truth", "candidate_truth")

    def key(self) -> bytes:
        return live_key(self.stream, self.model_name, self.production_version,
                        self.candidate_version, self.role, self.partition)


def live_key(stream: str, model_name: str, production_version: int, candidate_version: int,
             role: RolloutRole, partition: int) -> bytes:
    """A ``LiveCounts`` record's key. A canary's counts (two arms on disjoint keys) carry their
    role, so they never overwrite a shadow's (paired records) of the same pair; a shadow's key
    is unchanged."""
    tag = "" if role == RolloutRole.SHADOW else f"{role.value}|"
    return (f"{stream}|{model_name}|{production_version}|{candidate_version}|{tag}"
            f"{partition}").encode()
