"""What the gate made of a finished job or a stored version: promoted, kept or refused.

- promoted: the version became production (by its job, or later by hand).
- kept: stored and passed (or was not gated), but not promoted: promotion is off for the
  model, or promoting it would move production backwards.
- refused: the gate held it back; ``reason`` says why (the gate's reasons, joined by "; ").

Read from what the job and the version already hold, newest format first: ``status.json``'s
``result``/``reason``/``held_by`` (issue 23), else its ``promoted``/``gate_reasons`` with the
manifest's ``extra.gate`` (``passed``) to tell refused from kept. A field that is missing (an
old job, a job still running) leaves the outcome unknown (None) rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from headrace.core.errors import HeadraceError
from headrace.store import versions


class Result(StrEnum):
    PROMOTED = "promoted"
    KEPT = "kept"
    REFUSED = "refused"


@dataclass(frozen=True)
class Outcome:
    result: Result
    reason: str = ""  # the gate's reasons ("; "-joined); empty for a promotion
    held_by: tuple[str, ...] = ()  # the gate rules that held it back

    def line(self) -> str:
        """One line for a table: ``promoted``, ``kept: why``, ``refused: why``."""
        return f"{self.result.value}: {self.reason}" if self.reason else self.result.value

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result.value, "reason": self.reason,
                "held_by": list(self.held_by)}


def job_outcome(status: Mapping[str, Any], gate: Mapping[str, Any] | None = None
                ) -> Outcome | None:
    """The outcome of a job from its ``status.json`` (and its version's gate, if known)."""
    if status.get("state") not in (None, "succeeded"):
        return None  # failed, queued, running: no version was judged
    gate = gate or {}
    held = _strings(status.get("held_by")) or _strings(gate.get("held_by"))
    reasons = "; ".join(_strings(status.get("gate_reasons")) or _strings(gate.get("reasons")))
    given = status.get("result")
    if isinstance(given, str) and given in Result.__members__.values():
        result = Result(given)
        why = status.get("reason") if isinstance(status.get("reason"), str) else ""
        return Outcome(result, "" if result == Result.PROMOTED else (why or reasons), held)
    promoted = status.get("promoted")
    if promoted is True:
        return Outcome(Result.PROMOTED)
    if promoted is False:
        if gate.get("passed") is False:
            return Outcome(Result.REFUSED, reasons, held)
        return Outcome(Result.KEPT, reasons or _kept_why(gate))
    return None


def version_outcome(*, gate: Mapping[str, Any] | None, was_production: bool,
                    job_status: Mapping[str, Any] | None = None) -> Outcome | None:
    """The outcome of a stored version: production now or before wins; else its job's
    outcome, else what its manifest's gate says."""
    if was_production:
        return Outcome(Result.PROMOTED)
    if job_status is not None:
        found = job_outcome(job_status, gate)
        if found is not None:
            return found
    if not gate or not isinstance(gate.get("passed"), bool):
        return None
    reasons = "; ".join(_strings(gate.get("reasons")))
    if gate["passed"] is False:
        return Outcome(Result.REFUSED, reasons, tuple(_strings(gate.get("held_by"))))
    return Outcome(Result.KEPT, reasons or _kept_why(gate))


def stored_gate(root: Path, name: str | None, version: int | None) -> dict[str, Any] | None:
    """The gate result kept in ``name:version``'s manifest; None if it cannot be read."""
    if not name or not version:
        return None
    try:
        m, _ = versions.read_manifest(versions.model_dir(root, name) / str(version))
    except (HeadraceError, OSError):
        return None
    gate = m.extra.get("gate")
    return gate if isinstance(gate, dict) else None


def _kept_why(gate: Mapping[str, Any]) -> str:
    return "promotion off" if gate.get("promote") is False else ""


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value if v)
    return ()
