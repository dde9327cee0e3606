"""The control plane's logic: route train requests into jobs exactly once, drive the executor,
fire schedules, event rules and drift rules. The faust app (``headrace.trainers.control.app``)
calls it.

Dedup, in two layers:

1. The job table (faust Table, changelog-backed): a job id already in it is a duplicate.
2. ``jobs/<job_id>/request.json`` created exclusively on the DFS: the final arbiter between
   control-plane instances that do not share a table (or a table not yet recovered). A router
   holds the job's claim (``jobs.claim``) from before that file until the job's status, table
   row and submission exist; a ``request.json`` with no status and a free claim was left by a
   router killed in between, and the redelivery takes the job over.
3. The owner lock (``jobs.Owned``): the router that accepted a job holds it until the job
   ends there, so another router whose table was rebuilt from the DFS on start (or that
   recovers) never resumes a job queued or running elsewhere (D56).

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
    FINAL_STATES,
    CancelRequested,
    DriftDetected,
    JobEvent,
    JobEventKind,
    JobState,
    TrainRequested,
    parse,
)
from headrace.core.bad_records import BadRecords
from headrace.core.errors import HeadraceError, PermanentError, RecordRef
from headrace.store import versions
from headrace.store.dfs import resolve_dataset
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import cancelling, jobs
from headrace.trainers.admission import admit
from headrace.trainers.control.drift_rule import DriftRule, EpisodeState, episode_key, fold
from headrace.trainers.control.triggers import (
    EventRule,
    Triggers,
    make_request,
    schedule_request,
    slot_key,
)
from headrace.trainers.executors.base import Adopting, Executor, JobOutcome, JobSpec
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
    _owned: jobs.Owned | None = None
    _bad_drift: BadRecords = field(default_factory=lambda: BadRecords(log, "drift record"))

    @property
    def sink(self) -> EventSink:
        if self._sink is None:
            self._sink = EventSink(self.conn)
        return self._sink

    @property
    def owned(self) -> jobs.Owned:
        """The jobs this router owns (see ``jobs.Owned``)."""
        if self._owned is None:
            self._owned = jobs.Owned(self.root)
        return self._owned

    # -- train requests -------------------------------------------------------------------

    def on_request(self, record: RecordRef, table: Table) -> str | None:
        """Accept a TrainRequested record; return the job id if a job was created.

        Raises ``ValidationFailed`` (-> DLQ) when the record is not a TrainRequested. A
        ``CancelRequested`` (its schema header says so) goes to ``on_cancel``.
        """
        if record.header(hdr.SCHEMA) == CancelRequested.SCHEMA:
            self.on_cancel(record, table)
            return None
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
        with jobs.claim(self.root, jid) as mine:
            if not mine:  # a live router is creating or taking over this job right now
                # No table row: should that router die too, a redelivery here looks again.
                self._duplicate(jid, req, "another router is recording the job")
                return None
            jid, created = jobs.create_request(self.root, req)
            st = None if created else jobs.read_status(self.root, jid)
            if not created and st is not None:
                # Another router owns it: remember the job, never resume it from here.
                table[jid] = {**row_of(st.state, req), "owned": False}
                self._duplicate(jid, req, "job directory already exists")
                return None
            if not self.owned.take(jid):  # a live router has it queued or running
                self._duplicate(jid, req, "another router owns the job")
                return None
            if not created:  # request.json, no status, claim free: its router died mid-way
                log.warning("job %s was left without a status by a stopped router; "
                            "taking it over (request %s)", jid, req.event_id)
            self._start(jid, req, table)
        return jid

    def _start(self, jid: str, req: TrainRequested, table: Table) -> None:
        jobs.write_status(self.root, jobs.initial_status(jid, req))
        table[jid] = row_of(JobState.QUEUED, req)
        self._event(jid, req, JobEventKind.QUEUED,
                    message=f"{req.framework.value} {req.spec.task.value} on {req.dataset_uri} "
                            f"({req.trigger.kind.value}:{req.trigger.source})")
        problem = self._precheck(req)
        if problem is not None:  # fail fast: no process is started for a job that cannot run
            self._failed(jid, req, table, problem, attempts=0)
            return
        self.executor.submit(_job_spec(jid, req))

    # -- cancel requests ------------------------------------------------------------------

    def on_cancel(self, record: RecordRef, table: Table) -> None:
        """Stop a job an operator cancelled: claim its end (``cancelling``), stop the attempt
        (a queued one never starts), then the one final state CANCELLED with who and why. A
        finished job, or one already publishing, is refused (a DUPLICATE event says why); a
        second cancel changes nothing."""
        try:
            req = parse(CancelRequested, record.value or b"")
        except PermanentError as exc:
            raise exc.with_record(record, "parse") from None
        jid = req.job_id
        try:
            train = jobs.read_request(self.root, jid)
        except PermanentError:
            log.warning("cancel %s by %s: no job %s", req.event_id, req.requested_by, jid)
            return
        st = jobs.read_status(self.root, jid)
        if st is not None and st.state in FINAL_STATES:
            self._refused(jid, train, req, f"the job already {st.state.value}")
            return
        won = cancelling.claim(self.root, jid, cancelling.Claim(
            cancelling.CANCEL, req.requested_by, req.reason or None, req.event_id))
        if won.by != cancelling.CANCEL:
            self._refused(jid, train, req, "the job is publishing its model")
            return
        if won.event_id != req.event_id:
            self._duplicate(jid, train, f"already cancelled ({won.line()})")
        self._stop_cancelled(jid, train, table, won)

    def _refused(self, jid: str, train: TrainRequested, req: CancelRequested, why: str) -> None:
        log.info("cancel of job %s by %s refused: %s", jid, req.requested_by, why)
        self._event(jid, train, JobEventKind.DUPLICATE, reason=f"cancel refused: {why}",
                    message=f"cancel by {req.requested_by} refused: {why}")

    def _stop_cancelled(self, jid: str, train: TrainRequested, table: Table,
                        won: cancelling.Claim, handle: Any = None) -> None:
        """The cancel holds the job's end: stop what runs of it, then record the end once."""
        self.executor.cancel(jid)  # local: SIGTERM the process groups; queued: dropped
        if handle and isinstance(self.executor, Adopting):
            self.executor.reap(jid, handle)  # a previous control plane's attempt
        self.owned.release(jid)
        st = jobs.read_status(self.root, jid)
        if st is not None and st.state in FINAL_STATES:
            return  # recorded already (a redelivery, or before a restart)
        line = won.line()
        log.info("job %s %s", jid, line)
        jobs.update_status(self.root, jid, state=JobState.CANCELLED, reason=line,
                           finished_at=jobs.now_iso())
        table[jid] = {**row_of(JobState.CANCELLED, train), "reason": line,
                      "finished_at": jobs.now_iso()}
        self._event(jid, train, JobEventKind.CANCELLED, reason=line,
                    attempt=max(1, st.attempts if st is not None else 1),
                    message=f"{line}; nothing published")

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
        """After recovery: adopt what still runs (its handle is in the job table), reap what
        cannot be adopted -- all of it before anything starts -- then resubmit the other
        jobs that were queued or running (they resume from their last checkpoint)."""
        resume: list[tuple[str, TrainRequested, int]] = []
        for jid, row in list(table.items()):
            if not (row and row.get("owned", True) and jid not in self.executor.active()
                    and row.get("state") in (JobState.QUEUED, JobState.RUNNING)):
                continue
            try:
                req = jobs.read_request(self.root, jid)
            except HeadraceError:
                continue
            handle = row.get("handle")
            st = jobs.read_status(self.root, jid)
            won = cancelling.read_claim(self.root, jid)
            if won is not None and won.by == cancelling.CANCEL and (
                    st is None or st.state not in FINAL_STATES):
                # Cancelled before the restart, not yet recorded: never resumed.
                self._stop_cancelled(jid, req, table, won, handle)
                continue
            if st is not None and st.state in FINAL_STATES:
                if handle and isinstance(self.executor, Adopting):
                    self.executor.reap(jid, handle)  # a leftover of a finished job
                table[jid] = {**row, "state": st.state.value, "reason": st.reason}
                continue
            if not self.owned.take(jid):
                # Another live router has it (a table rebuilt from the DFS on start holds
                # every job there): it runs there, never here too.
                log.info("job %s is owned by another live router; not resumed here", jid)
                table[jid] = {**row, "owned": False}
                continue
            # The attempts already made count: a restart never gives a job a new budget.
            spec = _job_spec(jid, req, attempts_done=st.attempts if st is not None else 0)
            if handle and isinstance(self.executor, Adopting):
                if self.executor.adopt(spec, handle):
                    log.info("adopted job %s (%s)", jid, handle)
                    continue
                log.info("reaping job %s's previous attempt (%s)", jid, handle)
                self.executor.reap(jid, handle)
            resume.append((jid, req, spec.attempts_done))
        for jid, req, done in resume:
            log.info("resuming job %s after %d attempt(s)", jid, done)
            self.executor.submit(_job_spec(jid, req, attempts_done=done))

    def on_tick(self, table: Table) -> None:
        for jid in self.executor.active():
            row = table.get(jid)
            handle = self.executor.handle(jid) if isinstance(self.executor, Adopting) else None
            if row and handle and row.get("handle") != handle:
                # Where the running attempt is: a restarted control plane adopts or reaps it.
                row = table[jid] = {**row, "handle": handle}
            if row and row.get("state") == JobState.QUEUED:
                st = jobs.read_status(self.root, jid)
                if st is not None and st.state == JobState.RUNNING:
                    table[jid] = {**row, "state": JobState.RUNNING.value,
                                  "started_at": st.started_at}
        for outcome in self.executor.poll():
            self._ended(outcome, table)

    def on_executor_event(self, kind: str, message: str, *, job_id: str, **fields: Any) -> None:
        """Lifecycle an executor reports itself (the Kubernetes one: pods started, a pod
        failed and the Job retries, a pod the scheduler cannot place: ``waiting``, published
        as QUEUED with the scheduler's reason). Queued and the end are published by this class (from
        ``submit`` and ``poll``); log lines and progress by the job itself. Pod log lines
        (read when a Kubernetes job fails) go to the job's log file, for ``jobs logs``."""
        if kind == JobEventKind.LOG:
            try:
                pod, lines = fields.get("pod"), fields.get("lines")
                if pod and lines:  # a pod's new lines, appended once each
                    jobs.append_pod_log(self.root, job_id, str(pod),
                                        [(str(ts), int(seq), str(text))
                                         for ts, seq, text in lines])
                else:
                    with open(jobs.log_path(self.root, job_id), "a", encoding="utf-8") as f:
                        f.write(message.rstrip("\n") + "\n")
            except OSError as exc:
                log.warning("job %s: cannot append to its log: %s", job_id, exc)
            return
        if kind not in (JobEventKind.STARTED, JobEventKind.RETRYING, "waiting"):
            return
        try:
            req = jobs.read_request(self.root, job_id)
        except HeadraceError:
            return
        attempt = max(1, int(fields.get("attempt") or 1))
        if kind == "waiting":  # still queued, and the scheduler says why
            self._waiting(job_id, req, attempt, message, str(fields.get("reason") or message))
            return
        reason = message if kind == JobEventKind.RETRYING else None
        if kind == JobEventKind.STARTED:
            self._mark_running(job_id)
        self._event(job_id, req, JobEventKind(kind), attempt=attempt, message=message,
                    reason=reason)

    def _waiting(self, jid: str, req: TrainRequested, attempt: int, message: str,
                 reason: str) -> None:
        """A queued job whose pods the scheduler cannot place yet: ``jobs show`` and a second
        QUEUED event (with the reason) say why."""
        try:
            st = jobs.read_status(self.root, jid)
            if st is not None and st.state == JobState.QUEUED:
                jobs.update_status(self.root, jid, reason=reason[:4096])
        except (HeadraceError, OSError) as exc:
            log.warning("job %s: cannot record why it waits: %s", jid, exc)
        self._event(jid, req, JobEventKind.QUEUED, attempt=attempt, message=message[:16_384],
                    reason=reason[:4096])

    def _mark_running(self, jid: str) -> None:
        """Pods run: ``status.json`` says so before the chief writes it (a member may block
        in its start-up). The attempt count stays the job's own (a pod retried inside its
        Job counts itself)."""
        try:
            st = jobs.read_status(self.root, jid)
            if st is not None and st.state == JobState.QUEUED:
                jobs.update_status(self.root, jid, state=JobState.RUNNING,
                                   started_at=jobs.now_iso(), reason=None)
        except (HeadraceError, OSError) as exc:
            log.warning("job %s: cannot mark it running: %s", jid, exc)

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
        self.owned.release(out.job_id)
        req = jobs.read_request(self.root, out.job_id)
        if out.succeeded:
            st = jobs.read_status(self.root, out.job_id)
            table[out.job_id] = {**row_of(JobState.SUCCEEDED, req),
                                 "finished_at": st.finished_at if st else None,
                                 "version": st.version if st else None}
            return
        self._failed(out.job_id, req, table, out.reason, attempts=out.attempts,
                     exit_code=out.exit_code)

    def _failed(self, jid: str, req: TrainRequested, table: Table, reason: str, *,
                attempts: int, exit_code: int | None = None) -> None:
        self.owned.release(jid)
        reason = (reason.strip().splitlines() or ["failed"])[0]
        st = jobs.read_status(self.root, jid)
        if st is not None and st.state == JobState.CANCELLED:
            # Its attempt ended because it was cancelled: the final state stays CANCELLED.
            table[jid] = {**row_of(JobState.CANCELLED, req), "reason": st.reason,
                          "finished_at": st.finished_at}
            return
        if st is not None and st.state == JobState.SUCCEEDED:
            # The job published and wrote its final state: it is not rewritten (written once).
            log.warning("job %s already succeeded; not marking it failed (%s)", jid, reason)
            table[jid] = {**row_of(JobState.SUCCEEDED, req), "finished_at": st.finished_at,
                          "version": st.version}
            return
        jobs.update_status(self.root, jid, state=JobState.FAILED, reason=reason,
                           finished_at=jobs.now_iso(), exit_code=exit_code)
        table[jid] = {**row_of(JobState.FAILED, req), "reason": reason,
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
        for rule in self.triggers.of_kind(EventRule):
            if rule.stream != stream:
                continue
            row = counters.get(rule.name) or {"count": 0, "window": 0}
            total, window = int(row["count"]) + count, int(row["window"])
            while total >= rule.every:
                total -= rule.every
                window += 1
                req = make_request(rule.request, key=f"{rule.key_prefix}:{rule.name}:{window}",
                                   kind=rule.trigger_kind, source=rule.name, slot=str(window))
                self.sink.send(self.topics.train_requests, req, key=req.idempotency_key)
                fired.append(req)
            counters[rule.name] = {"count": total, "window": window}
        return fired

    def on_drift(self, record: RecordRef, episodes: Table) -> list[TrainRequested]:
        """Fold one ``events.drift`` record into every drift rule's episode state (the
        ``episodes`` table, keyed by rule name); request training for each episode that
        starts (``drift_rule`` says how, and why the request is sent before the row)."""
        if not record.value:
            return []  # a tombstone: a feature's state removed, nothing drifts
        try:
            ev = parse(DriftDetected, record.value)
        except PermanentError as exc:
            self._bad_drift.skip(f"{record.topic}/{record.partition}@{record.offset}", exc)
            return []
        fired: list[TrainRequested] = []
        rules = self.triggers.of_kind(DriftRule)
        # Read once per record, and only when a rule cares (RetriableError: retried).
        alias = (versions.read_alias(self.root, ev.model_name)
                 if any(r.matches(ev) for r in rules) else None)
        production = alias.version if alias is not None else None
        for rule in rules:
            before = EpisodeState.from_row(episodes.get(rule.name))
            step = fold(rule, before, ev, partition=record.partition, offset=record.offset,
                        production=production)
            if step.ended:
                log.info("drift rule %s: episode %d ended (%s)", rule.name, before.episode,
                         step.ended)
            if step.fire is not None:
                req = make_request(rule.request, key=episode_key(rule, step.fire),
                                   kind=rule.trigger_kind, source=rule.name,
                                   slot=str(step.fire))
                self.sink.send(self.topics.train_requests, req, key=req.idempotency_key)
                log.info("drift rule %s: episode %d started (%s:%d %s, %s %.4g > %.4g)",
                         rule.name, step.fire, ev.model_name, ev.model_version, ev.feature,
                         ev.statistic, ev.value, ev.threshold)
                fired.append(req)
            if step.state != before:
                episodes[rule.name] = step.state.to_row()
        return fired

    def close(self) -> None:
        self.executor.close()
        if self._owned is not None:
            self._owned.close()  # what still runs is adopted or resumed by the next router
        if self._sink is not None:
            self._sink.close()


def _job_spec(jid: str, req: TrainRequested, *, attempts_done: int = 0) -> JobSpec:
    return JobSpec(job_id=jid, model_name=req.model_name, framework=req.framework,
                   resources=req.resources, request_id=req.event_id,
                   strategy=req.spec.strategy, attempts_done=attempts_done)


def row_of(state: JobState, req: TrainRequested) -> dict[str, Any]:
    return {"state": state.value, "model_name": req.model_name,
            "framework": req.framework.value, "request_id": req.event_id,
            "idempotency_key": req.idempotency_key, "updated_at": jobs.now_iso()}
