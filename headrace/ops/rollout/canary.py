"""Start and stop a canary (``headrace models canary``): publish the stream's ``RolloutState``
that every scorer replica follows. The scorers do the rest: route by the salted hash, step
forward by records, promote at 100, roll back by themselves (``scorers.rollout.canary``).

A canary is one rollout of a stream: starting one replaces a shadow (or another canary) of
the stream. Each start draws a new salt, so a new canary takes a new, independent set of keys;
the salt is in the state, so it never changes while the canary runs.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path

from headrace.contracts import Canary, JobEventKind, RolloutRole, RolloutState
from headrace.core.errors import ValidationFailed
from headrace.core.naming import check_name
from headrace.ops.rollout.control import current_rollout, publish_rollout
from headrace.scorers.rollout.canary_outcomes import audit_event
from headrace.store.versions import PRODUCTION, read_alias, resolve
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics


def check_steps(percent: float, steps: Sequence[float]) -> list[float]:
    """The steps after ``percent``, rising, each in (percent, 100]."""
    if not 0 < percent < 100:
        raise ValidationFailed(f"--percent must be above 0 and below 100, got {percent:g}")
    out: list[float] = []
    last = percent
    for s in steps:
        if not last < s <= 100:
            raise ValidationFailed(f"--steps must rise above --percent {percent:g} up to 100, "
                                   f"got {','.join(f'{x:g}' for x in steps)}")
        out.append(float(s))
        last = s
    return out


def plan_canary(*, root: Path, ref: str, stream: str, percent: float,
                steps: Sequence[float] = (), min_records: int = 1000,
                max_error_rate_margin: float = 0.01, salt: str | None = None,
                min_labelled: int = 0, max_accuracy_drop: float | None = None) -> RolloutState:
    """The state that routes ``percent`` of ``stream``'s keys to ``ref`` (NAME:VERSION),
    advancing through ``steps`` after ``min_records`` candidate records each (and
    ``min_labelled`` labelled ones); rolled back when its live accuracy is worse than
    production's by more than ``max_accuracy_drop`` (None: not judged on labels); checked
    against the model store (nothing published)."""
    name, _, ver = ref.partition(":")
    if not ver.isdecimal():
        raise ValidationFailed(f"a canary needs NAME:VERSION, not {ref!r}")
    check_name(stream, what="stream name")
    mv = resolve(root, ref)  # every file verified: the scorers will refuse a corrupt one too
    prod = read_alias(root, name, PRODUCTION)
    if prod is None:
        raise ValidationFailed(f"model {name} has no production version to compare with; "
                               f"promote one first (headrace models promote {name}:VERSION)")
    if prod.version == mv.version:
        raise ValidationFailed(f"{name}:{mv.version} is already production")
    if min_records < 1:
        raise ValidationFailed(f"--min-records must be at least 1, got {min_records}")
    if not 0 <= max_error_rate_margin <= 1:
        raise ValidationFailed("--max-error-margin must be between 0 and 1, got "
                               f"{max_error_rate_margin:g}")
    if min_labelled < 0:
        raise ValidationFailed(f"--min-labelled must be 0 or more, got {min_labelled}")
    if max_accuracy_drop is not None and not 0 <= max_accuracy_drop <= 1:
        raise ValidationFailed("--max-accuracy-drop must be between 0 and 1, got "
                               f"{max_accuracy_drop:g}")
    canary = Canary(percent=percent, steps=check_steps(percent, steps), min_records=min_records,
                    salt=salt or secrets.token_hex(8),
                    max_error_rate_margin=max_error_rate_margin, min_labelled=min_labelled,
                    max_accuracy_drop=max_accuracy_drop)
    return RolloutState(stream=stream, model_name=name, candidate_version=mv.version,
                        role=RolloutRole.CANARY, canary=canary,
                        reason=f"canary of {name}:{mv.version} at {percent:g}% (production "
                               f"{name}:{prod.version})")


def start_canary(*, conn: KafkaConnection, topics: ControlTopics, root: Path, ref: str,
                 stream: str, percent: float, steps: Sequence[float] = (),
                 min_records: int = 1000, max_error_rate_margin: float = 0.01,
                 salt: str | None = None, min_labelled: int = 0,
                 max_accuracy_drop: float | None = None) -> RolloutState:
    """``plan_canary``, then publish it: every scorer of ``stream`` starts routing."""
    return publish_canary(conn=conn, topics=topics, state=plan_canary(
        root=root, ref=ref, stream=stream, percent=percent, steps=steps,
        min_records=min_records, max_error_rate_margin=max_error_rate_margin, salt=salt,
        min_labelled=min_labelled, max_accuracy_drop=max_accuracy_drop))


def publish_canary(*, conn: KafkaConnection, topics: ControlTopics, state: RolloutState
                   ) -> RolloutState:
    ensure_topics(conn, topics.specs())
    publish_rollout(conn, topics, state)
    _audit(conn, topics, state, JobEventKind.STARTED, state.reason)
    return state


def stop_canary(*, conn: KafkaConnection, topics: ControlTopics, stream: str, name: str,
                reason: str = "stopped by the operator") -> RolloutState | None:
    """End the stream's canary of model ``name`` (production scores every record again); the
    state that was running (None: there was no canary of ``name``)."""
    check_name(stream, what="stream name")
    ensure_topics(conn, topics.specs())
    was = current_rollout(conn, stream, topics=topics)
    if (was is None or was.role != RolloutRole.CANARY or was.candidate_version is None
            or was.model_name != name):
        return None
    publish_rollout(conn, topics, RolloutState(stream=stream, model_name=name, reason=reason))
    _audit(conn, topics, was, JobEventKind.FAILED, reason)
    return was


def _audit(conn: KafkaConnection, topics: ControlTopics, state: RolloutState,
           kind: JobEventKind, reason: str) -> None:
    send_events(conn, topics.jobs, [audit_event(state, kind, reason)],
                key_of=lambda e: e.job_id)
