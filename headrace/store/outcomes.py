"""One outcome vocabulary for a job and its version, computed here and only here, so that
``train --wait``, ``jobs``, ``models``, the dashboard and events.jobs tell the same story.

- promoted: the version is or was production: by its job, the live gate, a canary, by hand
  (``via`` says which; the gate's earlier word, if it differed, is the ``reason``).
- kept: stored and passed (or was not gated), but not promoted: promotion is off for the
  model, or promoting it would move production backwards.
- refused: the gate held it back; ``reason`` says why (the gate's reasons, joined by "; ").
- rolled back: it was production and production was rolled back from it.

Read from what the DFS already holds: the production alias and its history (who moved it and
why), the job's ``status.json`` (``result``/``reason``/``held_by``, issue 23; else its
``promoted``/``gate_reasons``) and the manifest's ``extra.gate``. A field that is missing (an
old job, a job still running) leaves the outcome unknown (None) rather than guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from headrace.core.errors import HeadraceError
from headrace.store import versions
from headrace.store.dfs import job_dir
from headrace.store.manifest import Manifest


class Result(StrEnum):
    PROMOTED = "promoted"
    KEPT = "kept"
    REFUSED = "refused"
    ROLLED_BACK = "rolled back"


class Via(StrEnum):
    """What made a version production (from the alias history's reason)."""
    JOB = "job"
    LIVE_GATE = "live gate"
    CANARY = "canary"
    HAND = "by hand"
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class Outcome:
    result: Result
    reason: str = ""  # the gate's reasons ("; "-joined); empty for a plain promotion
    held_by: tuple[str, ...] = ()  # the gate rules that held it back
    via: Via | None = None  # for promoted: what moved production to it, when known

    def line(self) -> str:
        """One line, the same in every view: ``promoted``, ``promoted (live gate): the gate
        had refused it: why``, ``kept: why``, ``refused: why``, ``rolled back: why``."""
        head = self.result.value
        if self.via is not None and self.via != Via.JOB:
            head += f" ({self.via.value})"
        return f"{head}: {self.reason}" if self.reason else head

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result.value, "reason": self.reason,
                "held_by": list(self.held_by), "via": self.via.value if self.via else None,
                "line": self.line()}

    @classmethod
    def from_line(cls, line: str | None) -> Outcome:
        """The inverse of ``line`` for a job event's reason (no reason: promoted). A reason
        in the older format (the gate's reasons alone) reads as kept."""
        if not line:
            return cls(Result.PROMOTED)
        head, sep, why = line.partition(": ")
        for r in Result:
            if head == r.value or (head.startswith(r.value + " (") and head.endswith(")")):
                via = head[len(r.value) + 2:-1] if head != r.value else ""
                return cls(r, why if sep else "",
                           via=Via(via) if via in Via.__members__.values() else None)
        return cls(Result.KEPT, line)


def job_outcome(status: Mapping[str, Any], gate: Mapping[str, Any] | None = None
                ) -> Outcome | None:
    """What the job's gate decided, from its ``status.json`` (and its version's gate)."""
    if status.get("state") not in (None, "succeeded"):
        return None  # failed, queued, running: no version was judged
    gate = gate or {}
    held = _strings(status.get("held_by")) or _strings(gate.get("held_by"))
    reasons = "; ".join(_strings(status.get("gate_reasons")) or _strings(gate.get("reasons")))
    given = status.get("result")
    if isinstance(given, str) and given in (Result.PROMOTED, Result.KEPT, Result.REFUSED):
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


def version_outcome(*, gate: Mapping[str, Any] | None, version: int | None = None,
                    history: Sequence[versions.AliasPointer] = (),
                    job_status: Mapping[str, Any] | None = None) -> Outcome | None:
    """A version's outcome: what production's history says of it wins (promoted, rolled
    back); else its job's outcome, else what its manifest's gate says."""
    judged = _judged(gate, job_status)
    moved = _production_story(version, history) if version is not None else None
    if moved is None:
        return judged
    if moved.result == Result.PROMOTED and moved.via not in (None, Via.JOB) and judged \
            and judged.result != Result.PROMOTED:
        # Promoted later (live gate, by hand): say what the job's gate had said.
        why = f"the gate had {judged.result.value} it" + (f": {judged.reason}"
                                                          if judged.reason else "")
        return Outcome(Result.PROMOTED, why, judged.held_by, moved.via)
    return moved


def _judged(gate: Mapping[str, Any] | None, job_status: Mapping[str, Any] | None
            ) -> Outcome | None:
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


def _production_story(version: int, history: Sequence[versions.AliasPointer]
                      ) -> Outcome | None:
    """Promoted (and by what) if ``version`` ever was production; rolled back if production
    was last moved away from it by a rollback. None if it never was production."""
    stint: versions.AliasPointer | None = None
    left: versions.AliasPointer | None = None
    for p in history:
        if p.version == version:
            stint, left = p, None
        elif stint is not None and p.previous == version:
            left = p
    if stint is None:
        return None
    if left is not None and left.reason.startswith("rollback"):
        return Outcome(Result.ROLLED_BACK, f"production rolled back to v{left.version}")
    return Outcome(Result.PROMOTED, via=via_of(stint.reason))


def via_of(reason: str) -> Via | None:
    """What moved the alias, from the reason its writer recorded (promotion.py, the job,
    canary_outcomes.py, live_evidence.py); None for an older, unexplained move."""
    for prefix, via in (("job ", Via.JOB), ("live gate", Via.LIVE_GATE),
                        ("canary", Via.CANARY), ("manual", Via.HAND),
                        ("rollback", Via.ROLLBACK)):
        if reason.startswith(prefix):
            return via
    return None


# --- from the DFS ------------------------------------------------------------------------------


def of_version(root: Path, name: str, version: int) -> Outcome | None:
    """``name:version``'s outcome from the DFS (manifest, production history, its job)."""
    gate = stored_gate(root, name, version)
    job_id = _job_of(root, name, version)
    return version_outcome(gate=gate, version=version, history=_history(root, name),
                           job_status=read_job_status(root, job_id))


def of_job(root: Path, status: Mapping[str, Any]) -> Outcome | None:
    """A job's outcome: its version's (so a job and its version always agree) once the job
    has succeeded and stored one; else what its status says."""
    if status.get("state") not in (None, "succeeded"):
        return None
    name, version = status.get("model_name"), status.get("version")
    gate = None  # only an older status (no ``result``) needs the manifest to tell refused
    if status.get("result") is None and status.get("promoted") is False:
        gate = stored_gate(root, name if isinstance(name, str) else None,
                           version if isinstance(version, int) else None)
    if isinstance(name, str) and isinstance(version, int) and version > 0:
        return version_outcome(gate=gate, version=version, history=_history(root, name),
                               job_status=status)
    return job_outcome(status, gate)


def stored_gate(root: Path, name: str | None, version: int | None) -> dict[str, Any] | None:
    """The gate result kept in ``name:version``'s manifest; None if it cannot be read."""
    m = _manifest(root, name, version)
    gate = m.extra.get("gate") if m is not None else None
    return gate if isinstance(gate, dict) else None


def read_job_status(root: Path, job_id: str | None) -> dict[str, Any] | None:
    if not job_id:
        return None
    try:
        data = json.loads((job_dir(root, job_id) / "status.json").read_bytes())
    except (HeadraceError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _manifest(root: Path, name: str | None, version: int | None) -> Manifest | None:
    if not name or not version:
        return None
    try:
        m, _ = versions.read_manifest(versions.model_dir(root, name) / str(version))
    except (HeadraceError, OSError):
        return None
    return m


def _job_of(root: Path, name: str, version: int) -> str | None:
    m = _manifest(root, name, version)
    return m.job_id if m is not None else None


def _history(root: Path, name: str) -> list[versions.AliasPointer]:
    try:
        return versions.alias_history(root, name)
    except (HeadraceError, OSError, ValueError, TypeError):
        return []


def _kept_why(gate: Mapping[str, Any]) -> str:
    return "promotion off" if gate.get("promote") is False else ""


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value if v)
    return ()
