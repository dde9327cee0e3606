"""The manifest: written last into a version, it lists every file with its sha256."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from headrace.core.types import Framework, SafeName, Task
from headrace.store.signature import ModelInput, ModelOutput, default_outputs, tabular_inputs

MANIFEST = "manifest.json"
# The saved format of a framework with a versioned one (its adapter refuses any other); the
# others have had one format, ``model_format`` "".
MODEL_FORMATS = {Framework.TORCH: "torch.export/1", Framework.ONNX: "onnx/1"}
# Formats a framework's adapter reads beside the one its trainer writes: TorchScript comes only
# by import (``headrace models import``).
READ_FORMATS = {Framework.TORCH: ("torch.export/1", "torchscript/1"), Framework.ONNX: ("onnx/1",)}
# 2: a text or category input whose manifest names a vocabulary file takes the ids its codec
# makes on the host, in every framework (1: a TensorFlow model took those strings and looked
# them up in its graph).
# 3: a text input may carry lead ids (``lead:k`` in its preprocessing; a reader of 2 would
# feed too few ids). A version is written in the least format its inputs need
# (each codec's ``format_needed``), so older scorers still read what they can feed.
# A reader refuses a version of a newer format than it knows (``check_format``).
FORMAT_VERSION = 3


class DatasetIdentity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str
    fingerprint: str  # sha256 of the dataset file(s)
    rows: int = 0


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    name: SafeName
    version: int = Field(default=0, ge=0)  # set when the version number is allocated
    framework: Framework
    task: Task
    features: tuple[str, ...]
    label: str
    classes: tuple[str, ...] = ()  # class names in output order; empty for a regressor
    input_dtype: str = "float32"
    # The signature (store.signature); empty in versions written before it: see ``input_signature``.
    inputs: tuple[ModelInput, ...] = ()
    outputs: tuple[ModelOutput, ...] = ()
    family: str = "mlp"
    model_format: str = ""  # MODEL_FORMATS[framework] where it has one
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> sha256
    metrics: dict[str, float] = Field(default_factory=dict)
    confusion_matrix: list[list[int]] = Field(default_factory=list)
    dataset: DatasetIdentity | None = None
    trigger_event_id: str | None = None
    job_id: str | None = None
    code_version: str = ""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def num_outputs(self) -> int:
        return len(self.classes) if self.classes else 1

    def input_signature(self) -> tuple[ModelInput, ...]:
        """The inputs the scorer decodes into; a version without them is tabular."""
        return self.inputs or tabular_inputs(self.features)

    def output_signature(self) -> tuple[ModelOutput, ...]:
        return self.outputs or default_outputs(self.task, self.classes)

    def check_format(self) -> None:
        """ValueError (one line) for a version written in a format newer than this reader's."""
        if self.format_version > FORMAT_VERSION:
            raise ValueError(f"{self.name}:{self.version} has model format "
                             f"{self.format_version}; this Headrace reads formats up to "
                             f"{FORMAT_VERSION}: upgrade the scorer")
