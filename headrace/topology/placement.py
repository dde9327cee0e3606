"""The planner's output: scorer groups, their pods and partitions, and why anything is not local.

A plan is plain data (JSON round-trip) so the next run can read it back as ``previous`` and
keep every ownership that is still valid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from headrace.core.errors import ConfigError
from headrace.core.files import read_config_text
from headrace.core.validation import first_error
from headrace.topology.cluster import Toleration

Reason = Literal[
    "no-replica-racks",  # Kafka metadata gave no racks for the partition
    "rack-full",  # replica racks exist and are eligible but have no free slot
    "gpu-type-missing",  # no node of the required GPU type in the replica racks
    "volume-elsewhere",  # the stream's volume is not reachable from the replica racks
    "unschedulable",  # replica racks hold only cordoned or untolerated tainted nodes
    "unknown-rack",  # a replica rack has no Kubernetes node at all
    "no-capacity",  # not placed anywhere: nothing eligible has a free slot
    "no-eligible-node",  # not placed: no node anywhere meets GPU type + volume + taints
    "trainer-reservation",  # the training gang could not be reserved in full
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeRequirement(_Frozen):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = "In"
    values: tuple[str, ...] = ()


class PodAssignment(_Frozen):
    ordinal: int = Field(ge=0)
    partitions: tuple[int, ...]
    node: str | None = Field(default=None, description="where the planner counted this pod's slot")


class ScorerGroup(_Frozen):
    """One locality group: the scorer pods of one stream in one rack."""

    name: str
    stream: str
    rack: str
    zone: str
    client_rack: str
    gpus: int
    gpu_type: str | None = None
    cpu_m: int
    memory_mib: int
    volume: str | None = None
    volume_claim: str | None = None
    affinity: tuple[NodeRequirement, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    pods: tuple[PodAssignment, ...]

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(sorted(p for pod in self.pods for p in pod.partitions))


class Explanation(_Frozen):
    stream: str
    reason: Reason
    partitions: tuple[int, ...] = ()
    group: str | None = None
    message: str


class TrainerReservation(_Frozen):
    workers: int
    gpus_per_worker: int
    gpu_type: str | None = None
    nodes: tuple[str, ...] = Field(default=(), description="one entry per reserved worker")

    @property
    def satisfied(self) -> bool:
        return len(self.nodes) == self.workers


class PlanStats(_Frozen):
    partitions: int
    placed: int
    in_rack: int
    pods: int
    gpus: int

    @property
    def in_rack_share(self) -> float:
        return self.in_rack / self.placed if self.placed else 0.0


class Plan(_Frozen):
    version: Literal[1] = 1
    groups: tuple[ScorerGroup, ...]
    unplaced: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    explanations: tuple[Explanation, ...] = ()
    trainer: TrainerReservation | None = None
    stats: PlanStats

    def owners(self) -> dict[tuple[str, int], tuple[str, int]]:
        """(stream, partition) -> (group name, pod ordinal)."""
        out: dict[tuple[str, int], tuple[str, int]] = {}
        for g in self.groups:
            for pod in g.pods:
                for p in pod.partitions:
                    out[(g.stream, p)] = (g.name, pod.ordinal)
        return out

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=1, sort_keys=True)


def moved_partitions(previous: Plan, current: Plan) -> int:
    """Partitions that were owned before and now have another owner (or none)."""
    now = current.owners()
    return sum(1 for key, owner in previous.owners().items() if now.get(key) != owner)


def load_plan(path: Path) -> Plan:
    text = read_config_text(path, what="plan file")
    try:
        return Plan.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(f"{path}: not a Headrace plan: {first_error(exc, root='plan')}"
                          ) from None
