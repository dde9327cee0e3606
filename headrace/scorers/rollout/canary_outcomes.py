"""What a scorer publishes when a canary moves: the next step, the promotion, or the rollback.

Every outcome is a new ``RolloutState`` on the compacted ``control.rollout`` (so every replica,
and a restarted one, routes by it) and an audit ``JobEvent`` on ``events.jobs`` under the
canary's own id (``canary.<stream>.<model>.v<candidate>.<salt>``: PROGRESS per step, SUCCEEDED
on promotion, FAILED on rollback, each with the reason and the counts). A promotion moves the
production alias to the candidate and announces it (``ModelPublished`` promoted); a rollback
announces ``ModelPublished`` rollback with the reason: production's version, the candidate as
``previous_version``. The alias itself never moved during the canary (only the routing did), so
there is nothing to move back.

Several replicas may reach the same decision at once: they publish equal states (the topic is
compacted by stream; the last one wins and says the same), and a promotion reads the alias
first, so only the replica that moves it announces it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from headrace.contracts import JobEvent, JobEventKind, ModelAction, RolloutState
from headrace.rollout.canary_steps import Decision, Ledger, advanced
from headrace.store.announcing import announcement
from headrace.store.versions import PRODUCTION, load_version, read_alias, set_alias
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics

log = logging.getLogger(__name__)


def audit_id(state: RolloutState) -> str:
    """The canary's id on events.jobs."""
    salt = state.canary.salt if state.canary else "-"
    return f"canary.{state.stream}.{state.model_name}.v{state.candidate_version}.{salt}"[:128]


def audit_event(state: RolloutState, kind: JobEventKind, text: str,
                metrics: dict[str, float] | None = None) -> JobEvent:
    """The canary's event on events.jobs. Only a FAILED one carries ``reason``: readers of
    events.jobs read a SUCCEEDED job's reason as its outcome line (store/outcomes.py)."""
    return JobEvent(job_id=audit_id(state), kind=kind, model_name=state.model_name,
                    message=text[:16_384],
                    reason=text[:4096] if kind == JobEventKind.FAILED else None,
                    metrics=metrics or {})


def counts(ledger: Ledger) -> dict[str, float]:
    return {"percent": ledger.percent,
            "candidate_records": float(ledger.candidate.records),
            "candidate_errors": float(ledger.candidate.errors),
            "production_records": float(ledger.production.records),
            "production_errors": float(ledger.production.errors),
            "candidate_labelled": float(ledger.candidate_labels.labelled),
            "candidate_correct": float(ledger.candidate_labels.correct),
            "production_labelled": float(ledger.production_labels.labelled),
            "production_correct": float(ledger.production_labels.correct)}


class CanaryOutcomes:
    def __init__(self, conn: KafkaConnection, topics: ControlTopics, root: Path) -> None:
        self.conn, self.topics, self.root = conn, topics, root
        self._sink: EventSink | None = None

    @property
    def sink(self) -> EventSink:
        if self._sink is None:  # most scorers never publish an outcome
            self._sink = EventSink(self.conn)
        return self._sink

    def advance(self, state: RolloutState, decision: Decision, ledger: Ledger) -> RolloutState:
        assert state.canary is not None and decision.next_percent is not None
        new = state.model_copy(update={
            "canary": advanced(state.canary, decision.next_percent),
            "reason": f"advanced to {decision.next_percent:g}%: {decision.reason}"})
        self._state(new)
        self._audit(state, JobEventKind.PROGRESS, new.reason, ledger)
        return new

    def promote(self, state: RolloutState, decision: Decision, ledger: Ledger) -> RolloutState:
        assert state.candidate_version is not None
        name, version = state.model_name, state.candidate_version
        reason = f"canary promoted {name}:{version}: {decision.reason}"
        pointer = read_alias(self.root, name, PRODUCTION)
        if pointer is None or pointer.version != version:
            moved = set_alias(self.root, name, version, alias=PRODUCTION, reason=reason[:500])
            mv = load_version(self.root, name, version)
            self.sink.send(self.topics.models, announcement(
                self.root, mv, previous=moved.previous, action=ModelAction.PROMOTED,
                job_id=audit_id(state), reason=reason), key=name)
        new = self._ended(state, reason)
        self._audit(state, JobEventKind.SUCCEEDED, reason, ledger)
        return new

    def rollback(self, state: RolloutState, reason: str, ledger: Ledger,
                 production_version: int) -> RolloutState:
        name = state.model_name
        reason = f"canary rolled back {name}:{state.candidate_version}: {reason}"
        log.error("%s", reason)
        mv = load_version(self.root, name, production_version, verify=False)
        self.sink.send(self.topics.models, announcement(
            self.root, mv, previous=state.candidate_version, action=ModelAction.ROLLBACK,
            job_id=audit_id(state), reason=reason), key=name)
        new = self._ended(state, reason)
        self._audit(state, JobEventKind.FAILED, reason, ledger)
        return new

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()

    def _ended(self, state: RolloutState, reason: str) -> RolloutState:
        new = RolloutState(stream=state.stream, model_name=state.model_name, reason=reason)
        self._state(new)
        return new

    def _state(self, state: RolloutState) -> None:
        self.sink.send(self.topics.rollout, state, key=state.stream)

    def _audit(self, state: RolloutState, kind: JobEventKind, reason: str,
               ledger: Ledger) -> None:
        self.sink.send(self.topics.jobs, audit_event(state, kind, reason, counts(ledger)),
                       key=audit_id(state))
