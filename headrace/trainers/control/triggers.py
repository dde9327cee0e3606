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
      - name: retrain-on-data
        stream: demo                 # counts records on data.demo
        every: 10000
        request: {...}

A schedule fires once per slot, with idempotency key ``schedule:<name>:<slot ISO>``; the last
slot seen is kept on the compacted ``events.schedules`` topic, so a restart neither repeats
nor (by default) back-fills slots. A new schedule starts at the next slot. A rule fires each
time ``every`` more records arrive, with key ``rule:<name>:<window number>``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from headrace.contracts import SafeName, TrainRequested, Trigger, TriggerKind
from headrace.core.errors import ConfigError
from headrace.core.validation import first_error


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SafeName
    cron: str
    request: dict[str, Any]

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, v: str) -> str:
        if not croniter.is_valid(v):
            raise ValueError(f"invalid cron expression {v!r}")
        return v

    def slot_at(self, now: datetime) -> datetime:
        """The latest slot at or before ``now`` (cron has minute granularity)."""
        base = now.astimezone(UTC).replace(second=0, microsecond=0)
        if croniter.match(self.cron, base):
            return base
        prev: datetime = croniter(self.cron, base).get_prev(datetime)
        return prev.astimezone(UTC)


class EventRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: SafeName
    stream: SafeName
    every: int = Field(ge=1)
    request: dict[str, Any]


class Triggers(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schedules: list[Schedule] = Field(default_factory=list)
    rules: list[EventRule] = Field(default_factory=list)


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
            make_request(r.request, key="rule:x:check", kind=TriggerKind.EVENT, source=r.name)
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
