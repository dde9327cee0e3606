"""The control plane's logic: route train requests into jobs exactly once, drive the executor,
fire schedules and event rules. The faust app (``headrace.trainers.control.app``) calls it.

Dedup, in two layers:

1. The job table (faust Table, changelog-backed): a job id already in it is a duplicate.
2. ``jobs/<job_id>/request.json`` created exclusively on the DFS: the final arbiter between
   control-plane instances that do not share a table (or a table not yet recovered).

Job ids derive from idempotency keys (``jobs.job_id_for``), so a duplicate is a name clash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from headrace.contracts import (
    JobEvent,
    JobEventKind,
    JobState,
    TrainRequested,
    TriggerKind,
    parse,
)
from headrace.core.errors import HeadraceError, PermanentError, RecordRef
from headrace.store.dfs import resolve_dataset
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.admission import admit
from headrace.trainers.control.triggers import Triggers, make_request, schedule_request, slot_key
from headrace.trainers.executors.base import Executor, JobOutcome, JobSpec
from headrace.trainers.limits import RequestCaps

log = logging.getLogger(__name__)
Table = MutableMapping[str, Any]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class ControlPlane:
    root: Path
    conn: KafkaConnection
    executor: Executor
    topics: ControlTopics = field(default_factory=ControlTopics)
    triggers: Triggers = field(default_factory=Triggers)
    now: Callable[[], datetime] = utcnow
    caps: RequestCaps = field(default_factory=RequestCaps)
    _sink: EventSink | None = None

    @property
    def sink(self) -> EventSink:
        if self._sink is None:
            self._sink = EventSink(self.conn)
        return self._sink

    # -- train requests -------------------------------------------------------------------

    def on_request(self, record: RecordRef, table: Table) -> str | None:
        """Accept a TrainRequested record; return the job id if a job was created.

        Raises ``ValidationFailed`` (-> DLQ) when the record is not a TrainRequested.
        """
        try:
            req = parse(TrainRequested, record.value or b"")
        except PermanentError as exc:
            raise exc.with_record(record, "parse") from None
        try:  # caps and code: refused before any job exists (-> DLQ with the reason)
            admit(req, root=self.root, caps=self.caps)
        except PermanentError as exc:
            raise exc.with_record(record, "admit") from None
        jid = jobs.job_id_for(req.idempotency_key)
        if table.get(jid) is not None:
            self._duplicate(jid, req, "already in the job table")
            return None
        jid, created = jobs.create_request(self.root, req)
        if not created:
            st = jobs.read_status(self.root, jid)
            # Another router owns it: remember the job, never resume it from here.
            table[jid] = {**_row(st.state if st else JobState.QUEUED, req), "owned": False}
            self._duplicate(jid, req, "job directory already exists")
            return None
        status = jobs.write_status(self.root, jobs.initial_status(jid, req))
        table[jid] = _row(JobState.QUEUED, req)
        self._event(jid, req, JobEventKind.QUEUED,
                    message=f"{req.framework.value} {req.spec.task.value} on {req.dataset_uri} "
                            f"({req.trigger.kind.value}:{req.trigger.source})")
        problem = self._precheck(req)
        if problem is not None:  # fail fast: no process is started for a job that cannot run
            self._failed(jid, req, table, problem, attempts=0)
            return jid
        self.executor.submit(JobSpec(job_id=jid, model_name=req.model_name,
                                     framework=req.framework, resources=req.resources,
                                     request_id=req.event_id, strategy=req.spec.strategy))
        del status
        return jid

    def on_request_failed(self, record: RecordRef, exc: HeadraceError) -> None:
        """A request that could not be accepted (dead-lettered by the app): if it parses, its
        job gets a FAILED event with the reason, so the requester sees why (never a silent
        drop). A DFS that refuses the job directory (``Permission denied: '/dfs/jobs'``) ends
        here. Requests refused by parsing or admission (caps, code) are not jobs: the dead
        letter alone says why."""
        if exc.stage in ("parse", "admit"):
            return
        try:
            req = parse(TrainRequested, record.value or b"")
        except PermanentError:
            return  # not a TrainRequested: the dead letter is all there is
        jid = jobs.job_id_for(req.idempotency_key)
        reason = (str(exc).strip().splitlines() or ["failed"])[0]
        log.error("train request %s (job %s) not accepted: %s", req.event_id, jid, reason)
        self._event(jid, req, JobEventKind.FAILED, reason=reason[:4096], attempt=1,
                    message=f"not accepted: {reason}"[:16_384])

    def _precheck(self, req: TrainRequested) -> str | None:
        try:
            resolve_dataset(self.root, req.dataset_uri)
        except PermanentError as exc:
            return str(exc)
        return None

    def _duplicate(self, jid: str, req: TrainRequested, why: str) -> None:
        log.info("duplicate request %s for job %s: %s", req.event_id, jid, why)
        self._event(jid, req, JobEventKind.DUPLICATE, message=why)

    # -- the executor -----------------------------------------------------------------------

    def on_ready(self, table: Table) -> None:
        """After recovery: resubmit jobs that were queued or running (they resume)."""
        for jid, row in list(table.items()):
            if (row and row.get("owned", True) and jid not in self.executor.active()
                    and row.get("state") in (JobState.QUEUED, JobState.RUNNING)):
                try:
                    req = jobs.read_request(self.root, jid)
                except HeadraceError:
                    continue
                st = jobs.read_status(self.root, jid)
                if st is not None and st.state in (JobState.SUCCEEDED, JobState.FAILED):
                    table[jid] = {**row, "state": st.state.value, "reason": st.reason}
                    continue
                log.info("resuming job %s", jid)
                self.executor.submit(JobSpec(job_id=jid, model_name=req.model_name,
                                             framework=req.framework, resources=req.resources,
                                             request_id=req.event_id, strategy=req.spec.strategy))

    def on_tick(self, table: Table) -> None:
        for jid in self.executor.active():
            row = table.get(jid)
            if row and row.get("state") == JobState.QUEUED:
                st = jobs.read_status(self.root, jid)
                if st is not None and st.state == JobState.RUNNING:
                    table[jid] = {**row, "state": JobState.RUNNING.value,
                                  "started_at": st.started_at}
        for outcome in self.executor.poll():
            self._ended(outcome, table)

    def on_executor_event(self, kind: str, message: str, *, job_id: str, **fields: Any) -> None:
        """Lifecycle an executor reports itself (the Kubernetes one: pods started, a pod
        failed and the Job retries). Queued and the end are published by this class (from
        ``submit`` and ``poll``); log lines and progress by the job itself."""
        if kind not in (JobEventKind.STARTED, JobEventKind.RETRYING):
            return
        try:
            req = jobs.read_request(self.root, job_id)
        except HeadraceError:
            return
        attempt = max(1, int(fields.get("attempt") or 1))
        reason = message if kind == JobEventKind.RETRYING else None
        self._event(job_id, req, JobEventKind(kind), attempt=attempt, message=message,
                    reason=reason)

    def on_start(self, jid: str, attempt: int, pid: int) -> None:
        try:
            req = jobs.read_request(self.root, jid)
        except HeadraceError:
            return
        self._event(jid, req, JobEventKind.STARTED, attempt=attempt,
                    message=f"attempt {attempt} started (pid {pid})")

    def on_retry(self, jid: str, attempt: int, reason: str, delay: float) -> None:
        try:
            req = jobs.read_request(self.root, jid)
        except HeadraceError:
            return
        jobs.update_status(self.root, jid, state=JobState.QUEUED,
                           reason=f"retrying in {delay:.1f}s: {reason}")
        self._event(jid, req, JobEventKind.RETRYING, attempt=attempt, reason=reason,
                    message=f"attempt {attempt} in {delay:.1f}s")

    def _ended(self, out: JobOutcome, table: Table) -> None:
        req = jobs.read_request(self.root, out.job_id)
        if out.succeeded:
            st = jobs.read_status(self.root, out.job_id)
            table[out.job_id] = {**_row(JobState.SUCCEEDED, req),
                                 "finished_at": st.finished_at if st else None,
                                 "version": st.version if st else None}
            return
        self._failed(out.job_id, req, table, out.reason, attempts=out.attempts,
                     exit_code=out.exit_code)

    def _failed(self, jid: str, req: TrainRequested, table: Table, reason: str, *,
                attempts: int, exit_code: int | None = None) -> None:
        reason = (reason.strip().splitlines() or ["failed"])[0]
        jobs.update_status(self.root, jid, state=JobState.FAILED, reason=reason,
                           finished_at=jobs.now_iso(), exit_code=exit_code)
        table[jid] = {**_row(JobState.FAILED, req), "reason": reason,
                      "finished_at": jobs.now_iso()}
        self._event(jid, req, JobEventKind.FAILED, reason=reason, attempt=max(1, attempts),
                    message=f"failed: {reason}")

    def _event(self, jid: str, req: TrainRequested, kind: JobEventKind, **fields: Any) -> None:
        self.sink.send(self.topics.jobs, JobEvent(job_id=jid, kind=kind,
                                                  model_name=req.model_name,
                                                  request_id=req.event_id, **fields), key=jid)

    # -- triggers ---------------------------------------------------------------------------

    def on_schedules(self, table: Table) -> list[TrainRequested]:
        """Fire every schedule whose current slot is newer than the last one seen."""
        fired: list[TrainRequested] = []
        now = self.now()
        for s in self.triggers.schedules:
            slot = slot_key(s, now)
            row = table.get(s.name)
            if row is None:
                table[s.name] = {"slot": slot, "fired": False}  # a new schedule: next slot
                continue
            if row.get("slot", "") >= slot:
                continue
            req = schedule_request(s, now)
            self.sink.send(self.topics.train_requests, req, key=req.idempotency_key)
            table[s.name] = {"slot": slot, "fired": True, "event_id": req.event_id}
            log.info("schedule %s fired for slot %s", s.name, slot)
            fired.append(req)
        return fired

    def on_data(self, stream: str, count: int, counters: Table) -> list[TrainRequested]:
        fired: list[TrainRequested] = []
        for rule in self.triggers.rules:
            if rule.stream != stream:
                continue
            row = counters.get(rule.name) or {"count": 0, "window": 0}
            total, window = int(row["count"]) + count, int(row["window"])
            while total >= rule.every:
                total -= rule.every
                window += 1
                req = make_request(rule.request, key=f"rule:{rule.name}:{window}",
                                   kind=TriggerKind.EVENT, source=rule.name, slot=str(window))
                self.sink.send(self.topics.train_requests, req, key=req.idempotency_key)
                fired.append(req)
            counters[rule.name] = {"count": total, "window": window}
        return fired

    def close(self) -> None:
        self.executor.close()
        if self._sink is not None:
            self._sink.close()


def _row(state: JobState, req: TrainRequested) -> dict[str, Any]:
    return {"state": state.value, "model_name": req.model_name,
            "framework": req.framework.value, "request_id": req.event_id,
            "idempotency_key": req.idempotency_key, "updated_at": jobs.now_iso()}
