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
from headrace.contracts.drift import DriftDetected, DriftWindowState, WindowRange
from headrace.contracts.families import FAMILIES, Family, family
from headrace.contracts.jobs import (
    FINAL_STATES,
    CancelRequested,
    JobEvent,
    JobEventKind,
    JobState,
)
from headrace.contracts.lineage import LineageRange
from headrace.contracts.models import ModelAction, ModelPublished
from headrace.contracts.predictions import OutputValue, Prediction, TopLabel
from headrace.contracts.rollout import Canary, LiveCounts, RolloutRole, RolloutState
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
    c.SCHEMA: c for c in (TrainRequested, CancelRequested, JobEvent, ModelPublished,
                          Prediction, DriftDetected, RolloutState, LiveCounts, LineageRange)
}

__all__ = [
    "CODE_REF_PATTERN",
    "CONTRACTS",
    "ENTRYPOINT_PATTERN",
    "FAMILIES",
    "FINAL_STATES",
    "MAX_EVENT_BYTES",
    "OBJECT_STORE_SCHEMES",
    "Canary",
    "CancelRequested",
    "CodeRef",
    "Contract",
    "DatasetUri",
    "DriftDetected",
    "DriftWindowState",
    "Family",
    "Framework",
    "JobEvent",
    "JobEventKind",
    "JobState",
    "LineageRange",
    "LiveCounts",
    "ModelAction",
    "ModelChoice",
    "ModelPublished",
    "ModelSpec",
    "OutputValue",
    "Prediction",
    "Resources",
    "RolloutRole",
    "RolloutState",
    "SafeName",
    "Task",
    "TopLabel",
    "TrainRequested",
    "Trigger",
    "TriggerKind",
    "WindowRange",
    "describe_validation_error",
    "family",
    "new_id",
    "parse",
    "utcnow",
]
