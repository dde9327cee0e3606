"""Domain contracts: the versioned events Headrace exchanges (training requests, job events,
model promotions, predictions). ``headrace.streams`` carries them; it does not define them."""

from headrace.contracts.base import (
    MAX_EVENT_BYTES,
    Contract,
    describe_validation_error,
    new_id,
    parse,
    utcnow,
)
from headrace.contracts.families import FAMILIES, Family, family
from headrace.contracts.jobs import JobEvent, JobEventKind, JobState
from headrace.contracts.models import ModelAction, ModelPublished
from headrace.contracts.predictions import OutputValue, Prediction, TopLabel
from headrace.contracts.training import (
    OBJECT_STORE_SCHEMES,
    DatasetUri,
    ModelChoice,
    ModelSpec,
    Resources,
    TrainRequested,
    Trigger,
    TriggerKind,
)
from headrace.core.types import (
    CODE_REF_PATTERN,
    ENTRYPOINT_PATTERN,
    CodeRef,
    Framework,
    SafeName,
    Task,
)

CONTRACTS: dict[str, type[Contract]] = {
    c.SCHEMA: c for c in (TrainRequested, JobEvent, ModelPublished, Prediction)
}

__all__ = [
    "CODE_REF_PATTERN", "CONTRACTS", "ENTRYPOINT_PATTERN", "FAMILIES", "MAX_EVENT_BYTES",
    "OBJECT_STORE_SCHEMES", "CodeRef", "Contract", "DatasetUri", "Family", "Framework", "JobEvent",
    "JobEventKind", "JobState", "ModelAction", "ModelChoice", "ModelPublished", "ModelSpec",
    "OutputValue", "Prediction", "Resources", "SafeName", "Task", "TopLabel", "TrainRequested",
    "Trigger", "TriggerKind", "describe_validation_error", "family", "new_id", "parse", "utcnow",
]
