"""Value types shared by the event contracts, the model store, trainers and scorers.

They live here, below every package, so that the model store does not import the Kafka
package for them; ``headrace.contracts`` re-exports them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from headrace.core.errors import ValidationFailed
from headrace.core.naming import check_name


def _safe_name(value: str) -> str:
    try:
        return check_name(value, what="name")
    except ValidationFailed as exc:  # pydantic reports ValueErrors with the field's location
        raise ValueError(str(exc)) from None


SafeName = Annotated[str, AfterValidator(_safe_name)]


class Framework(StrEnum):
    TENSORFLOW = "tensorflow"
    MXNET = "mxnet"
    TORCH = "torch"
    ONNX = "onnx"  # imported models (headrace.imports): scored on ONNX Runtime, never trained

    @classmethod
    def _missing_(cls, value: object) -> Framework | None:
        return cls.TORCH if value == "pytorch" else None  # the other name people use


TrainedFramework = Literal["tensorflow", "mxnet", "torch"]  # what a training job runs
_TRAINED: dict[Framework, TrainedFramework] = {
    Framework.TENSORFLOW: "tensorflow", Framework.MXNET: "mxnet", Framework.TORCH: "torch"}


def trained_framework(framework: Framework) -> TrainedFramework:
    """A framework a training job runs (``TrainRequested`` refuses the others first)."""
    try:
        return _TRAINED[framework]
    except KeyError:
        raise ValueError(f"{framework.value} models are imported, not trained") from None


class Task(StrEnum):
    CLASSIFIER = "classifier"
    REGRESSOR = "regressor"


CODE_REF_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}@[0-9a-f]{12,64}$"
ENTRYPOINT_PATTERN = (r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,15}"
                      r":[A-Za-z_][A-Za-z0-9_]*$")


class CodeRef(BaseModel):
    """A model package registered with ``headrace code push``: ``NAME@<hex>`` (12 to 64 hex
    of its sha256) and the ``module:function`` that builds the model. Never the code itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(pattern=CODE_REF_PATTERN, max_length=128)
    entrypoint: str = Field(pattern=ENTRYPOINT_PATTERN, max_length=256)

    @property
    def name(self) -> str:
        return self.code.split("@", 1)[0]

    @property
    def digest_prefix(self) -> str:
        return self.code.split("@", 1)[1]
