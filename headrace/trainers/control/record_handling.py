"""What the control app does with one record a hook fails on. A train request is retried with
backoff while the fault is retriable, then dead-lettered with the reason (never dropped); a
drift record is retried, then logged and left (its rule's row unchanged, so a later record
sends the same key again). A fatal error goes up: the agent stops and the process exits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from headrace.core.errors import FatalError, HeadraceError, PermanentError, RecordRef
from headrace.streams.client_errors import as_headrace
from headrace.streams.producing import EventSink
from headrace.trainers.control.app_config import ControlAppConfig, ControlHooks
from headrace.trainers.control.plane import Table

log = logging.getLogger("headrace.trainers.control.app")  # the app's log, as before the move


def record_of(msg: Any) -> RecordRef:
    """A faust message as the plane's record."""
    return RecordRef(
        topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key,
        value=msg.value, headers=tuple((k, v or b"") for k, v in (msg.headers or [])),
        timestamp_ms=int(msg.timestamp * 1000) if msg.timestamp else None)


async def route_request(record: RecordRef, *, cfg: ControlAppConfig, hooks: ControlHooks,
                        jobs: Table, sink: Callable[[], EventSink]) -> None:
    """Hand one train request to the plane (``hooks.on_request``) until it is taken or
    dead-lettered."""
    # Permanent: dead-letter at once. Retriable (a DFS or broker hiccup): retry with
    # backoff, then dead-letter with the reason -- a request is never dropped silently.
    for attempt in range(1, cfg.route_attempts + 1):
        try:
            try:
                hooks.on_request(record, jobs)
                return
            except Exception as raw:  # a client's or a bug's: classified, never a crash
                raise as_headrace(raw, "routing a train request") from raw
        except FatalError:
            raise  # not this request's fault: the agent stops, the process exits
        except PermanentError as exc:
            if exc.__cause__ is not None and not isinstance(exc.__cause__, HeadraceError):
                log.error("train request at offset %s: %s", record.offset, exc,
                          exc_info=exc.__cause__)
            failed: HeadraceError = exc
            break
        except HeadraceError as exc:
            failed = exc
            if attempt == cfg.route_attempts:
                break
            log.warning("train request at offset %s (attempt %d): %s", record.offset,
                        attempt, exc)
            await asyncio.sleep(cfg.route_backoff_s * 2 ** (attempt - 1))
    sink().dead_letter(cfg.topics.train_requests_dlq, record, failed,
                       stage=failed.stage or "route")
    if hooks.on_request_failed is not None and failed.stage != "parse":
        try:
            hooks.on_request_failed(record, failed)
        except HeadraceError as exc:
            log.error("reporting a failed request at offset %s: %s", record.offset, exc)


async def act_on_drift(record: RecordRef, *, cfg: ControlAppConfig,
                       on_drift: Callable[[RecordRef, Table], object], episodes: Table) -> None:
    """Hand one events.drift record to the drift rules (``hooks.on_drift``)."""
    # A request that could not be sent leaves the rule's row unchanged, so a retry
    # sends the same key again (never a second episode).
    for attempt in range(1, cfg.route_attempts + 1):
        try:
            on_drift(record, episodes)
            return
        except FatalError:
            raise
        except HeadraceError as exc:
            if isinstance(exc, PermanentError) or attempt == cfg.route_attempts:
                log.error("drift record at offset %s not acted on: %s", record.offset, exc)
                return
            log.warning("drift record at offset %s (attempt %d): %s", record.offset,
                        attempt, exc)
            await asyncio.sleep(cfg.route_backoff_s * 2 ** (attempt - 1))
