"""The ``kind: drift`` trigger rule: one TrainRequested per drift episode.

The control plane follows ``events.drift`` (``DriftDetected``, compacted per stream, model,
version and feature) and folds each record into the rule's :class:`EpisodeState`, a row of a
faust table whose changelog is a compacted topic (so the state survives a restart, like a
schedule's last slot). The fold:

1. A record at an offset the row has already folded is skipped: faust may redeliver records
   whose table write it already made, and a replay must not end and restart an episode.
2. A record of another stream, model or feature (``features:``) is ignored.
3. Only the production version's drift counts: when the model has a production alias, a
   record of any other version (a canary's or shadow's candidate, or a version production
   has left) is ignored; without an alias, the newest version seen counts and older ones
   are stale. When the counted version changes (a promotion, a rollback), the episode ends
   and that model's drift starts clean: a retrained model has no drift yet.
4. Drifting state is kept per (model, scorer, feature): two scorers of the stream see the
   same drift in their own partitions, and one scorer's "back to normal" does not end the
   drift the other still sees.
5. The episode ends when nothing drifts any more; a new one starts (and fires) when a
   feature has drifted ``min_windows`` windows in a row.

A fired episode's request has the idempotency key ``drift:<rule>:<episode>``. The request is
sent before the row is written: a control plane that dies in between folds the record again
and sends the same key, which the router dedups into the one job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from headrace.contracts import DriftDetected, TriggerKind
from headrace.core.types import SafeName


class DriftRule(BaseModel):
    """``kind: drift``: retrain ``request`` when ``stream`` drifts (any of ``features``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trigger_kind: ClassVar[TriggerKind] = TriggerKind.DRIFT
    key_prefix: ClassVar[str] = "drift"

    kind: Literal["drift"]
    name: SafeName
    stream: SafeName
    request: dict[str, Any]
    model: SafeName | None = None  # only this model's drift (default: any model on the stream)
    features: tuple[str, ...] | None = Field(default=None, min_length=1)
    min_windows: int = Field(default=1, ge=1, le=10_000)

    @field_validator("features")
    @classmethod
    def _named(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and any(not f or len(f) > 256 for f in v):
            raise ValueError("every feature must be a name of 1-256 characters")
        return v

    def matches(self, ev: DriftDetected) -> bool:
        return (ev.stream == self.stream
                and (self.model is None or ev.model_name == self.model)
                and (self.features is None or ev.feature in self.features))


@dataclass(frozen=True)
class EpisodeState:
    """A drift rule's state, stored as a table row (:meth:`to_row`)."""

    episode: int = 0  # the last episode fired (0: none yet)
    active: bool = False  # inside episode ``episode``: nothing fires until it ends
    versions: dict[str, int] = field(default_factory=dict)  # model -> newest version seen
    drifting: dict[str, int] = field(default_factory=dict)  # model|scorer|feature -> windows
    offsets: dict[str, int] = field(default_factory=dict)  # partition -> next offset to fold

    @classmethod
    def from_row(cls, row: dict[str, Any] | None) -> EpisodeState:
        if not row:
            return cls()

        def ints(name: str) -> dict[str, int]:
            return {str(k): int(v) for k, v in (row.get(name) or {}).items()}

        return cls(episode=int(row.get("episode", 0)), active=bool(row.get("active", False)),
                   versions=ints("versions"), drifting=ints("drifting"),
                   offsets=ints("offsets"))

    def to_row(self) -> dict[str, Any]:
        return {"episode": self.episode, "active": self.active,
                "versions": dict(self.versions), "drifting": dict(self.drifting),
                "offsets": dict(self.offsets)}


@dataclass(frozen=True)
class Fold:
    state: EpisodeState
    fire: int | None = None  # the episode to request training for
    ended: str | None = None  # why the active episode ended, when it did


def fold(rule: DriftRule, state: EpisodeState, ev: DriftDetected, *, partition: int,
         offset: int, production: int | None = None) -> Fold:
    """``state`` after the record ``ev`` at ``partition``/``offset`` (steps in the module doc);
    ``production``: the production version of ``ev``'s model (None: it has no alias)."""
    part = str(partition)
    if offset < state.offsets.get(part, 0):
        return Fold(state)
    state = replace(state, offsets={**state.offsets, part: offset + 1})
    if not rule.matches(ev):
        return Fold(state)
    model = ev.model_name
    seen = state.versions.get(model)
    if production is not None and ev.model_version != production:
        return Fold(state)  # a candidate's drift, or a version production has left
    if production is None and seen is not None and ev.model_version < seen:
        return Fold(state)  # stale: a scorer not yet on the newer version
    ended = None
    drifting = dict(state.drifting)
    if ev.model_version != seen:
        if seen is not None:  # a retrained model starts clean
            drifting = {k: n for k, n in drifting.items() if not k.startswith(f"{model}|")}
            if state.active:
                ended = f"{model}:{ev.model_version} replaced {model}:{seen}"
        state = replace(state, active=state.active and ended is None,
                        versions={**state.versions, model: ev.model_version})
    who = f"{model}|{ev.scorer}|{ev.feature}"
    if ev.drifting:
        drifting[who] = max(1, ev.consecutive)
    else:
        drifting.pop(who, None)
    state = replace(state, drifting=drifting)
    if state.active and not drifting:
        return Fold(replace(state, active=False),
                    ended="every feature is back within its thresholds")
    if not state.active and any(n >= rule.min_windows for n in drifting.values()):
        n = state.episode + 1
        return Fold(replace(state, episode=n, active=True), fire=n, ended=ended)
    return Fold(state, ended=ended)


def episode_key(rule: DriftRule, episode: int) -> str:
    return f"{rule.key_prefix}:{rule.name}:{episode}"
