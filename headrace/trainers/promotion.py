"""Promotion and rollback: move the ``production`` alias, then announce it on events.models."""

from __future__ import annotations

from pathlib import Path

from headrace.contracts import ModelAction, ModelPublished
from headrace.core.errors import PermanentError
from headrace.store.announcing import announcement
from headrace.store.versions import PRODUCTION, load_version, read_alias, set_alias
from headrace.streams.producing import EventSink


def promote(*, root: Path, sink: EventSink, topic: str, name: str, version: int,
            job_id: str | None = None, reason: str = "promoted") -> ModelPublished:
    """Point ``production`` at ``name:version`` (verified) and publish ModelPublished."""
    mv = load_version(root, name, version)
    pointer = set_alias(root, name, version, alias=PRODUCTION, reason=reason)
    event = announcement(root, mv, previous=pointer.previous, job_id=job_id)
    sink.send(topic, event, key=name)
    return event


def rollback(*, root: Path, sink: EventSink, topic: str, name: str) -> ModelPublished:
    """Point ``production`` back at the version it pointed to before the current one."""
    current = read_alias(root, name, PRODUCTION)
    if current is None:
        raise PermanentError(f"model {name} has no production version to roll back")
    if current.previous is None:
        raise PermanentError(f"model {name}: production v{current.version} has no previous "
                             "version to roll back to")
    target = current.previous
    mv = load_version(root, name, target)
    set_alias(root, name, target, alias=PRODUCTION, reason=f"rollback from v{current.version}")
    event = announcement(root, mv, previous=current.version, action=ModelAction.ROLLBACK)
    sink.send(topic, event, key=name)
    return event
