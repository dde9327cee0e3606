"""Value types shared by the event contracts, the model store, trainers and scorers.

They live here, below every package, so that the model store does not import the Kafka
package for them; ``headrace.streams.contracts`` re-exports them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator

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


class Task(StrEnum):
    CLASSIFIER = "classifier"
    REGRESSOR = "regressor"
