"""What every step of a job sees: its request, where it reports (status.json, events.jobs)
and its place in a gang; its log also goes to events.jobs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.contracts import JobEvent, JobEventKind, TrainRequested
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs, stopping
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.limits import RequestCaps
from headrace.trainers.run_log import NoRunLog, RunLog

log = logging.getLogger("headrace.job")


@dataclass
class JobContext:
    root: Path
    job_id: str
    request: TrainRequested
    sink: EventSink | None
    topics: ControlTopics
    attempt: int = 1
    caps: RequestCaps = field(default_factory=RequestCaps)
    member: GangMember = field(default_factory=GangMember)
    # Run by an executor, which retries or writes the final state; else (by hand) the job
    # writes its own final state: ``status.json`` never stays ``running`` after it.
    supervised: bool = False
    # The stop rules besides early stopping (trainers.stop_rules: the entry points pass them).
    stop_rules: Sequence[stopping.StopRuleFactory] = ()
    run_log: RunLog = field(default_factory=NoRunLog)  # MLflow where configured (chief only)

    def event(self, kind: JobEventKind, *, wait: bool = True, **fields: Any) -> None:
        if self.sink is None:
            return
        if self.member.distributed:
            fields["worker"] = self.member.index
        ev = JobEvent(job_id=self.job_id, kind=kind, model_name=self.request.model_name,
                      attempt=self.attempt, request_id=self.request.event_id, **fields)
        self.sink.send(self.topics.jobs, ev, key=self.job_id, wait=wait)

    def status(self, **changes: Any) -> None:
        if self.member.chief:  # status.json has one writer
            jobs.update_status(self.root, self.job_id, **changes)


class EventLogHandler(logging.Handler):
    """Log lines of the job also go to events.jobs (LOG), so operators can follow them."""

    def __init__(self, ctx: JobContext) -> None:
        super().__init__(logging.INFO)
        self.ctx = ctx

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # logging must never fail the job
            self.ctx.event(JobEventKind.LOG, message=self.format(record)[:16_000], wait=False)


def fmt(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items()) if "." not in k)
