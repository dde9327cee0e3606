"""What a training request says: the model to build, its resources, its trigger."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from headrace.contracts.base import Contract, new_id, utcnow
from headrace.contracts.families import family, supports
from headrace.core.types import CodeRef, Framework, SafeName, Task

_SCHEME_RE = re.compile(r"^[a-z][a-z0-9+.-]*://")
OBJECT_STORE_SCHEMES = ("s3", "gs", "hdfs", "abfs")


def _check_dataset_uri(uri: str) -> str:
    """A dataset lives on the DFS (a relative path or ``dfs://path``) or in an object store."""
    if not uri or len(uri) > 1024 or "\x00" in uri:
        raise ValueError("dataset URI must be 1-1024 printable characters")
    scheme = uri.split("://", 1)[0] if _SCHEME_RE.match(uri) else ""
    if scheme and scheme != "dfs" and scheme not in OBJECT_STORE_SCHEMES:
        raise ValueError(f"unsupported dataset URI scheme {scheme!r}")
    path = uri.split("://", 1)[1] if scheme else uri
    if scheme in OBJECT_STORE_SCHEMES and any(c in path for c in "?#@"):
        # pyarrow reads options (endpoint_override, credentials) from a URI's query and
        # user info: a request must not point the trainer at another endpoint.
        raise ValueError("object-store dataset URI must not carry a query, fragment or "
                         "credentials (no endpoint override)")
    if scheme in ("", "dfs"):
        if path.startswith("/") or "\\" in path:
            raise ValueError("dataset path must be relative to the DFS root")
        if any(part in ("..", "") for part in path.split("/")):
            raise ValueError("dataset path must not contain '..' or empty segments")
    return uri


DatasetUri = Annotated[str, AfterValidator(_check_dataset_uri)]


class TriggerKind(StrEnum):
    MANUAL = "manual"
    SCHEDULE = "schedule"
    EVENT = "event"
    TUNE = "tune"  # a trial of a hyperparameter study (headrace.trainers.tuning)
    DRIFT = "drift"  # a drift episode of a stream (a `kind: drift` rule)


def _family(value: str) -> str:
    family(value)  # the one family table (contracts.families)
    return value


def _init_weights(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.startswith(("models/", "datasets/")) or ".." in value.split("/"):
        raise ValueError("init_weights must be a DFS path under models/ or datasets/")
    if not value.endswith((".keras", ".weights.h5", ".params", ".npz", ".pt")):
        raise ValueError("init_weights must be a .keras, .weights.h5, .params, .npz or .pt "
                         "file")
    return value


def _model_kind(value: Any) -> str:
    return "code" if isinstance(value, dict | CodeRef) else "family"


# A tagged union: an error names only the branch the value took (a string or an object).
ModelChoice = Annotated[
    Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_family),
              Tag("family")]
    | Annotated[CodeRef, Tag("code")],
    Discriminator(_model_kind),
]


class ModelSpec(BaseModel):
    """What to build and how to train it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A model family by name, or a registered code package (CodeRef).
    model: ModelChoice = "mlp"
    task: Task = Task.CLASSIFIER
    label: str = Field(default="label", min_length=1, max_length=128)
    features: tuple[str, ...] | None = None  # None: every column but the label
    hidden: tuple[Annotated[int, Field(ge=1, le=16384)], ...] = (64, 64)
    activation: Literal["relu", "tanh", "sigmoid"] = "relu"
    # The most epochs: training stops earlier when validation loss stops improving.
    epochs: int = Field(default=100, ge=1, le=10_000)
    batch_size: int | None = Field(default=None, ge=1, le=1_000_000)  # None: from the rows
    learning_rate: float = Field(default=1e-3, gt=0, le=10)  # the starting rate
    validation_split: float = Field(default=0.2, gt=0, lt=1)
    # Early stopping: epochs without a better validation loss before training stops.
    patience: int = Field(default=10, ge=1, le=10_000)
    # plateau: halve the rate after patience // 2 epochs without a better validation loss.
    lr_schedule: Literal["plateau", "constant"] = "plateau"
    seed: int = 0
    checkpoint_every_steps: int | None = Field(default=None, ge=1)
    # Distributed training (with resources.workers > 1 or resources.servers > 0): auto is
    # all-reduce for TensorFlow and parameter servers for MXNet.
    strategy: Literal["auto", "allreduce", "parameter_server"] = "auto"
    # Family hyperparameters (each family reads the ones it uses; docs/training.md).
    filters: tuple[Annotated[int, Field(ge=1, le=1024)], ...] = Field(
        default=(32, 64), min_length=1, max_length=8)  # cnn: conv blocks
    embedding_dim: int = Field(default=64, ge=2, le=4096)  # text, category embeddings
    max_tokens: int = Field(default=20_000, ge=10, le=1_000_000)  # text vocabulary
    max_length: int = Field(default=64, ge=1, le=4096)  # text tokens per row
    image_size: tuple[Annotated[int, Field(ge=8, le=4096)],
                      Annotated[int, Field(ge=8, le=4096)]] | None = None  # (height, width)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    init_weights: Annotated[str | None, AfterValidator(_init_weights)] = Field(
        default=None, max_length=1024)
    # Drift reference (docs/drift.md): the live window size, in records, its thresholds are
    # calibrated for, and the per-window false-alarm rate across all features.
    drift_window: int = Field(default=1000, ge=20, le=1_000_000)
    drift_false_alarm_rate: float = Field(default=0.01, gt=0, lt=0.5)


class Resources(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu: float = Field(default=1.0, gt=0, le=1024)
    memory_gib: float = Field(default=2.0, gt=0, le=4096)
    gpus: int = Field(default=0, ge=0, le=64)
    workers: int = Field(default=1, ge=1, le=256)
    servers: int = Field(default=0, ge=0, le=64)  # parameter servers (strategy parameter_server)
    # Each parameter server's own pod (CPU-only unless asked): servers hold and sum weights.
    server_cpu: float = Field(default=1.0, gt=0, le=1024)
    server_memory_gib: float = Field(default=2.0, gt=0, le=4096)
    server_gpus: int = Field(default=0, ge=0, le=64)

    @property
    def total_gpus(self) -> int:
        """Every GPU the whole gang asks for (servers count only with parameter servers)."""
        return self.gpus * self.workers + self.server_gpus * self.servers


class Trigger(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: TriggerKind = TriggerKind.MANUAL
    source: str = Field(default="cli", max_length=256)  # schedule name, rule name, or caller
    # schedule slot (ISO time), rule window, or drift episode number
    slot: str | None = Field(default=None, max_length=64)


class TrainRequested(Contract):
    SCHEMA: ClassVar[str] = "headrace.TrainRequested"

    event_id: str = Field(default_factory=new_id, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    idempotency_key: str = Field(pattern=r"^[A-Za-z0-9_.:@/-]{1,256}$")
    created_at: datetime = Field(default_factory=utcnow)
    model_name: SafeName
    framework: Framework
    dataset_uri: DatasetUri
    spec: ModelSpec = Field(default_factory=ModelSpec)
    hyperparameters: dict[str, float | int | str | bool] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    trigger: Trigger = Field(default_factory=Trigger)

    @model_validator(mode="after")
    def _family_runs_here(self) -> TrainRequested:
        # Refused where the request enters, never inside a job (a missing builder).
        if self.framework == Framework.ONNX:
            raise ValueError("onnx models are imported (headrace models import), not trained")
        m = self.spec.model
        if isinstance(m, str) and not supports(m, self.framework.value):
            raise ValueError(f"model family {m!r} has no {self.framework.value} builder")
        return self
