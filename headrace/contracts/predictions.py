"""One prediction per scored row on ``predictions.<stream>``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from headrace.contracts.base import Contract
from headrace.core.types import SafeName


class TopLabel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    score: float


class OutputValue(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    scores: list[float]
    label: str | None = None
    top_k: list[TopLabel] | None = None


class Prediction(Contract):
    SCHEMA: ClassVar[str] = "headrace.Prediction"

    key: str | None = None
    source_topic: str
    source_partition: int = Field(ge=0)
    source_offset: int = Field(ge=0)
    model_name: SafeName
    model_version: int = Field(ge=1)
    scores: list[float]
    label: str | int | float | None = None
    row: int = 0  # row index inside an Arrow batch message
    # Classifiers with many classes: the k best labels with their scores, best first.
    top_k: list[TopLabel] | None = None
    # Models with several outputs: each output by name (its scores or values, label, top_k);
    # ``scores``/``label``/``top_k`` above are the first output's.
    outputs: dict[str, OutputValue] | None = None
