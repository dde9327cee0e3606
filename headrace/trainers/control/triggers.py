"""Triggers besides a manual request: cron schedules and "every N records" event rules.

File format (YAML; ``headrace control --triggers FILE``)::

    schedules:
      - name: nightly
        cron: "0 2 * * *"            # UTC
        request:                     # a TrainRequested template (no idempotency key)
          model_name: demo
          framework: tensorflow
          dataset_uri: datasets/demo.parquet
          spec: {epochs: 3}
    rules:
      - name: retrain-on-data        # kind: event (the default)
        stream: demo                 # counts records on data.demo
        every: 10000
        request: {...}
      - name: retrain-on-drift
        kind: drift                  # follows events.drift (headrace.trainers.control.drift_rule)
        stream: demo
        features: [f0, f1]           # optional: only these features (default: any)
        min_windows: 2               # optional: windows in a row drifting (default 1)
        request: {...}

A schedule fires once per slot, with idempotency key ``schedule:<name>:<slot ISO>``; the last
slot seen is kept on the compacted ``events.schedules`` topic, so a restart neither repeats
nor (by default) back-fills slots. A new schedule starts at the next slot. A rule fires each
time ``every`` more records arrive, with key ``rule:<name>:<window number>``. A drift rule
fires once per drift episode, with key ``drift:<name>:<episode>``.

Rule kinds have one home, :data:`RULE_KINDS`: a kind is a model class with a ``kind`` literal,
the ``trigger_kind`` its requests carry and the ``key_prefix`` of their idempotency keys.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
)

from headrace.contracts import SafeName, TrainRequested, Trigger, TriggerKind
from headrace.core.errors import ConfigError
from headrace.core.validation import first_error
from headrace.trainers.control.drift_rule import DriftRule


def _croniter() -> Any:
    # Imported when a schedule is read, not with the package: croniter comes with the
    # `control` extra, and `headrace train` (which imports this module) runs without it.
    from croniter import croniter

    return croniter


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SafeName
    cron: str
    request: dict[str, Any]

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, v: str) -> str:
        if not _croniter().is_valid(v):
            raise ValueError(f"invalid cron expression {v!r}")
        return v

    def slot_at(self, now: datetime) -> datetime:
        """The latest slot at or before ``now`` (cron has minute granularity)."""
        base = now.astimezone(UTC).replace(second=0, microsecond=0)
        croniter = _croniter()
        if croniter.match(self.cron, base):
            return base
        prev: datetime = croniter(self.cron, base).get_prev(datetime)
        return prev.astimezone(UTC)


class EventRule(BaseModel):
    """``kind: event`` (the default): retrain each time ``every`` records reach the stream."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trigger_kind: ClassVar[TriggerKind] = TriggerKind.EVENT
    key_prefix: ClassVar[str] = "rule"

    kind: Literal["event"] = "event"
    name: SafeName
    stream: SafeName
    every: int = Field(ge=1)
    request: dict[str, Any]


# Every rule kind: `kind:` in the triggers file -> its model (a new kind is added here and to
# the tagged union `Rule` below, with the same tag).
RULE_KINDS: dict[str, type[EventRule] | type[DriftRule]] = {"event": EventRule,
                                                            "drift": DriftRule}
R = TypeVar("R", EventRule, DriftRule)


def _rule_kind(v: Any) -> str | None:
    kind = v.get("kind", "event") if isinstance(v, dict) else getattr(v, "kind", None)
    return kind if kind in RULE_KINDS else None


Rule = Annotated[
    Annotated[EventRule, Tag("event")] | Annotated[DriftRule, Tag("drift")],
    Discriminator(_rule_kind, custom_error_type="rule_kind",
                  custom_error_message=f"kind must be one of: {', '.join(RULE_KINDS)}"),
]


class Triggers(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schedules: list[Schedule] = Field(default_factory=list)
    rules: list[Rule] = Field(default_factory=list)

    @field_validator("rules")
    @classmethod
    def _unique_names(cls, rules: list[EventRule | DriftRule]
                      ) -> list[EventRule | DriftRule]:
        # A rule's name keys its state (counters, drift episodes) and its requests.
        names = [r.name for r in rules]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"two rules are named {dup!r}")
        return rules

    def of_kind(self, cls: type[R]) -> list[R]:
        return [r for r in self.rules if isinstance(r, cls)]


def load_triggers(path: Path | None) -> Triggers:
    if path is None:
        return Triggers()
    try:
        doc = yaml.safe_load(path.read_text()) or {}
        trig = Triggers.model_validate(doc)
        for s in trig.schedules:
            make_request(s.request, key="schedule:x:check", kind=TriggerKind.SCHEDULE,
                         source=s.name)
        for r in trig.rules:
            make_request(r.request, key=f"{r.key_prefix}:x:check", kind=r.trigger_kind,
                         source=r.name)
        return trig
    except FileNotFoundError:
        raise ConfigError(f"triggers file {path} does not exist") from None
    except (yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"triggers file {path}: {str(exc).splitlines()[0]}"
                          f"{_first(exc)}") from None


def _first(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return f": {first_error(exc, root='')}"
    return ""


def slot_key(schedule: Schedule, now: datetime) -> str:
    """The current slot of ``schedule`` as ISO text (part of the idempotency key)."""
    return schedule.slot_at(now).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_request(schedule: Schedule, now: datetime) -> TrainRequested:
    """The TrainRequested for the slot current at ``now``, keyed ``schedule:<name>:<slot>``.

    The control plane's scheduler and ``headrace schedule fire`` (the CronJob) both build it
    here, so the same slot is the same job whoever fires it.
    """
    slot = slot_key(schedule, now)
    return make_request(schedule.request, key=f"schedule:{schedule.name}:{slot}",
                        kind=TriggerKind.SCHEDULE, source=schedule.name, slot=slot)


def find_schedule(triggers: Triggers, name: str) -> Schedule:
    for s in triggers.schedules:
        if s.name == name:
            return s
    known = ", ".join(s.name for s in triggers.schedules) or "none"
    raise ConfigError(f"no schedule named {name!r} in the triggers file (known: {known})")


def make_request(template: dict[str, Any], *, key: str, kind: TriggerKind, source: str,
                 slot: str | None = None) -> TrainRequested:
    data = {k: v for k, v in template.items() if k not in ("idempotency_key", "trigger")}
    data["idempotency_key"] = key
    data["trigger"] = Trigger(kind=kind, source=source, slot=slot)
    try:
        return TrainRequested.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"trigger {source}: bad request template{_first(exc)}") from None
