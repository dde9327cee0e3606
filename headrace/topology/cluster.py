"""The planner's input: a cluster description (nodes, volumes, streams, resource needs).

Read from a YAML file (``load_cluster``) or assembled from already-fetched live data
(``headrace.topology.live``). Frozen and validated, so the planner never re-checks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from headrace.core.errors import ConfigError, ValidationFailed
from headrace.core.files import read_config_text
from headrace.core.naming import check_name
from headrace.core.validation import first_error


def _stream_name(value: str) -> str:
    # pydantic only collects ValueError; ValidationFailed would escape as a traceback.
    try:
        return check_name(value, what="stream name")
    except ValidationFailed as exc:
        raise ValueError(str(exc)) from None


StreamName = Annotated[str, AfterValidator(_stream_name)]
_K8S_NAME = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"
_LABEL_VALUE = r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Taint(_Frozen):
    key: str = Field(min_length=1, max_length=253)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Toleration(_Frozen):
    key: str = Field(min_length=1, max_length=253)
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.key != taint.key or (self.effect and self.effect != taint.effect):
            return False
        return self.operator == "Exists" or self.value == taint.value


class Node(_Frozen):
    name: str = Field(pattern=_K8S_NAME)
    rack: str = Field(min_length=1, max_length=63, pattern=_LABEL_VALUE)
    zone: str = Field(default="default", min_length=1, max_length=63, pattern=_LABEL_VALUE)
    cpu_m: int = Field(alias="cpuMillis", ge=0, description="allocatable CPU in millicores")
    memory_mib: int = Field(alias="memoryMiB", ge=0)
    gpus: int = Field(default=0, ge=0, le=64)
    gpu_type: str | None = Field(default=None, alias="gpuType", pattern=_LABEL_VALUE)
    schedulable: bool = True
    taints: tuple[Taint, ...] = ()

    @model_validator(mode="after")
    def _gpu_type_needs_gpus(self) -> Node:
        if self.gpu_type and not self.gpus:
            raise ValueError(f"node {self.name}: gpuType set but gpus is 0")
        return self


class Volume(_Frozen):
    """A data volume a scorer mounts; only the listed nodes (or zones) can reach it."""

    name: str = Field(pattern=_K8S_NAME)
    claim: str | None = Field(default=None, description="PVC name; defaults to the volume name")
    nodes: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_kind(self) -> Volume:
        if bool(self.nodes) == bool(self.zones):
            raise ValueError(f"volume {self.name}: give exactly one of nodes or zones")
        return self

    @property
    def claim_name(self) -> str:
        return self.claim or self.name


class Stream(_Frozen):
    """A ``data.<stream>`` topic: its partitions and where each partition's replicas live."""

    name: StreamName
    partitions: int = Field(ge=1, le=100_000)
    partition_racks: tuple[tuple[str, ...], ...] | None = Field(
        default=None, alias="partitionRacks"
    )
    rack_cycle: tuple[str, ...] | None = Field(default=None, alias="rackCycle")
    replication_factor: int = Field(default=3, alias="replicationFactor", ge=1, le=7)
    volume: str | None = None
    gpu_type: str | None = Field(default=None, alias="gpuType")
    max_partitions_per_pod: int | None = Field(default=None, alias="maxPartitionsPerPod", ge=1)

    @model_validator(mode="after")
    def _racks_consistent(self) -> Stream:
        if self.partition_racks is not None and self.rack_cycle is not None:
            raise ValueError(f"stream {self.name}: give partitionRacks or rackCycle, not both")
        if self.partition_racks is not None and len(self.partition_racks) != self.partitions:
            raise ValueError(
                f"stream {self.name}: partitionRacks has {len(self.partition_racks)} entries "
                f"for {self.partitions} partitions"
            )
        return self

    def replica_racks(self) -> list[tuple[str, ...]]:
        """Racks of each partition's replicas (``rackCycle`` mimics Kafka's rack-aware layout)."""
        if self.partition_racks is not None:
            return [tuple(r) for r in self.partition_racks]
        if self.rack_cycle:
            cyc, rf = self.rack_cycle, min(self.replication_factor, len(self.rack_cycle))
            n = len(cyc)
            return [tuple(cyc[(p + i) % n] for i in range(rf)) for p in range(self.partitions)]
        return [() for _ in range(self.partitions)]


class ScorerNeeds(_Frozen):
    cpu_m: int = Field(default=2000, alias="cpuMillis", ge=1)
    memory_mib: int = Field(default=4096, alias="memoryMiB", ge=1)
    gpus: int = Field(default=1, ge=0, le=16)
    max_partitions_per_pod: int = Field(default=8, alias="maxPartitionsPerPod", ge=1, le=10_000)
    tolerations: tuple[Toleration, ...] | None = None

    def effective_tolerations(self) -> tuple[Toleration, ...]:
        # GPU nodes are conventionally tainted nvidia.com/gpu; GPU scorers tolerate it.
        if self.tolerations is not None:
            return self.tolerations
        if self.gpus:
            return (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
        return ()


class TrainerNeeds(_Frozen):
    """GPU capacity kept free for one training gang, so scorers never take all of it."""

    workers: int = Field(default=0, ge=0, le=256)
    gpus_per_worker: int = Field(default=1, alias="gpusPerWorker", ge=1, le=16)
    gpu_type: str | None = Field(default=None, alias="gpuType")
    cpu_m: int = Field(default=4000, alias="cpuMillis", ge=1)
    memory_mib: int = Field(default=16384, alias="memoryMiB", ge=1)
    # Opt-in: naming a scheduler the cluster lacks would leave training pods Pending.
    gang: Literal["none", "volcano", "kueue"] = Field(
        default="none", description="gang scheduler of training Jobs (the control plane's "
        "Role follows it); without one, a multi-worker Job's pods start as they fit")


class Labels(_Frozen):
    """Node label keys the plan writes into affinity terms."""

    rack: str = "topology.headrace.io/rack"
    zone: str = "topology.kubernetes.io/zone"
    hostname: str = "kubernetes.io/hostname"
    gpu_type: str = Field(default="nvidia.com/gpu.product", alias="gpuType")


class Deploy(_Frozen):
    """How the objects built from a plan are deployed (image, claims, secret, scorer knobs)."""

    namespace: str = Field(default="headrace", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    image: str = "ghcr.io/headrace/headrace:0.1.0"
    # The CUDA image, for scorer groups that request GPUs (Containerfile.gpu).
    gpu_image: str = Field(default="ghcr.io/headrace/headrace:0.1.0-gpu", alias="gpuImage")
    dfs_claim: str = Field(default="headrace-dfs", alias="dfsClaim", pattern=_K8S_NAME)
    dfs_root: str = Field(default="/dfs", alias="dfsRoot", pattern=r"^/")
    kafka_secret: str = Field(default="headrace-kafka", alias="kafkaSecret", pattern=_K8S_NAME)
    http_port: int = Field(default=8080, alias="httpPort", ge=1, le=65535)
    grace_s: int = Field(default=20, alias="graceSeconds", ge=1, le=3600)
    batch_size: int = Field(default=1024, alias="batchSize", ge=1)
    max_wait_ms: int = Field(default=50, alias="maxWaitMs", ge=0)
    decode_processes: int = Field(default=1, alias="decodeProcesses", ge=0, le=64)


class ClusterSpec(_Frozen):
    nodes: tuple[Node, ...]
    volumes: tuple[Volume, ...] = ()
    streams: tuple[Stream, ...] = ()
    scorer: ScorerNeeds = Field(default_factory=ScorerNeeds)
    trainer: TrainerNeeds = Field(default_factory=TrainerNeeds)
    labels: Labels = Field(default_factory=Labels)
    deploy: Deploy = Field(default_factory=Deploy)

    @model_validator(mode="after")
    def _references(self) -> ClusterSpec:
        _unique("node", [n.name for n in self.nodes])
        _unique("volume", [v.name for v in self.volumes])
        _unique("stream", [s.name for s in self.streams])
        names = {n.name for n in self.nodes}
        vols = {v.name for v in self.volumes}
        for v in self.volumes:
            missing = sorted(set(v.nodes) - names)
            if missing:
                raise ValueError(f"volume {v.name}: unknown nodes {missing}")
        for s in self.streams:
            if s.volume is not None and s.volume not in vols:
                raise ValueError(f"stream {s.name}: unknown volume {s.volume!r}")
        return self

    def without_node(self, name: str) -> ClusterSpec:
        """The same cluster after node ``name`` left (volumes pinned to it lose it too)."""
        nodes = tuple(n for n in self.nodes if n.name != name)
        vols = tuple(
            v.model_copy(update={"nodes": tuple(x for x in v.nodes if x != name)})
            if v.nodes else v
            for v in self.volumes
        )
        return self.model_copy(update={"nodes": nodes, "volumes": vols})


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"duplicate {what} {n!r}")
        seen.add(n)


def parse_cluster(data: Any, *, source: str = "cluster") -> ClusterSpec:
    """Validate a decoded mapping; raise ``ConfigError`` naming the first bad field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {first_error(exc, root='cluster')}") from None


def load_cluster(path: Path) -> ClusterSpec:
    """Read a cluster description from YAML; ``ConfigError`` on any bad input."""
    text = read_config_text(path, what="cluster file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: invalid YAML{where}") from None
    return parse_cluster(data, source=str(path))
