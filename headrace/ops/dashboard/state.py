"""What the dashboard shows, gathered from where it lives: the events.jobs topic (job
lifecycle, progress, logs; folded here), the compacted events.drift (drift.py), the DFS
(records.py), the scorers' /metrics endpoints (scrape.py), the broker's topics (streams.py)
and the dead-letter topics. Every reader is defensive: a missing or malformed source shows as
empty or as an error line, never as a crashed dashboard."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.contracts import JobEvent, JobEventKind, parse
from headrace.core.errors import HeadraceError, ValidationFailed
from headrace.core.settings import Settings
from headrace.ops.dashboard import records
from headrace.ops.dashboard.dead_letters import DeadLetterBoard
from headrace.ops.dashboard.drift import DriftBoard
from headrace.ops.dashboard.health import HealthBoard
from headrace.ops.dashboard.records import MAX_LOG_LINES
from headrace.ops.dashboard.scrape import ScorerBoard
from headrace.ops.dashboard.streams import all_streams, streams_on_dfs
from headrace.store.outcomes import Outcome
from headrace.streams.clients import KafkaConnection, list_topics
from headrace.streams.reading import Follower, Record
from headrace.streams.topics import ControlTopics

__all__ = ["MAX_LOG_LINES", "DashboardState", "JobBoard", "JobView"]
TOPICS_TTL_S = 5.0
DEAD_LETTERS_EVERY_S = 5.0  # pause between two background passes over every stream
_TERMINAL = {JobEventKind.SUCCEEDED: "succeeded", JobEventKind.FAILED: "failed",
             JobEventKind.CANCELLED: "cancelled"}


@dataclass
class JobView:
    job_id: str
    model_name: str | None = None
    status: str = "queued"
    attempt: int = 1
    epoch: int | None = None
    step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    progress: float | None = None  # 0..1 when the job reports epochs and a total
    # From the SUCCEEDED event, until the job's status.json says better (records.enrich_job).
    outcome: dict[str, Any] | None = None
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))

    def to_json(self, *, logs: int = 0) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "logs"}
        d["log_count"] = len(self.logs)
        if logs:
            d["logs"] = list(self.logs)[-logs:]
        return d


class JobBoard:
    """Folds JobEvents (in topic order) into one view per job."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobView] = {}
        self.lock = threading.Lock()
        self.events = 0
        self.bad_events = 0

    def apply(self, rec: Record) -> None:
        try:
            ev = parse(JobEvent, rec.value or b"")
        except ValidationFailed:
            self.bad_events += 1
            return
        with self.lock:
            self.events += 1
            job = self.jobs.setdefault(ev.job_id, JobView(ev.job_id))
            ts = ev.ts.isoformat()
            job.first_ts = job.first_ts or ts
            job.last_ts = ts
            job.model_name = ev.model_name or job.model_name
            job.attempt = max(job.attempt, ev.attempt)
            if ev.kind in _TERMINAL:
                job.status = _TERMINAL[ev.kind]
                if ev.kind == JobEventKind.SUCCEEDED:
                    job.progress = 1.0
                    # The event's reason is the outcome's line (none: promoted).
                    job.outcome = Outcome.from_line(ev.reason).to_json()
            elif ev.kind in (JobEventKind.STARTED, JobEventKind.PROGRESS, JobEventKind.RETRYING):
                if job.status not in _TERMINAL.values() or ev.kind == JobEventKind.STARTED:
                    job.status = "retrying" if ev.kind == JobEventKind.RETRYING else "running"
            elif ev.kind == JobEventKind.DUPLICATE and job.status == "queued":
                job.status = "duplicate"
            if ev.epoch is not None:
                job.epoch = ev.epoch
            if ev.step is not None:
                job.step = ev.step
            if ev.metrics:
                job.metrics.update(ev.metrics)
                total = ev.metrics.get("epochs") or ev.metrics.get("total_epochs")
                if job.status == "succeeded":
                    pass  # a finished job stays full, whatever its last events carried
                elif "progress" in ev.metrics:
                    job.progress = min(1.0, max(0.0, float(ev.metrics["progress"])))
                elif total and ev.epoch is not None:
                    job.progress = min(1.0, ev.epoch / float(total))
            if ev.reason:
                job.reason = ev.reason
            if ev.message:
                for line in ev.message.splitlines()[-50:]:
                    job.logs.append(f"{ts} {ev.kind.value}: {line}")
            elif ev.kind != JobEventKind.LOG:
                job.logs.append(f"{ts} {ev.kind.value}")

    def list(self, *, limit: int, status: str | None) -> list[dict[str, Any]]:
        with self.lock:
            jobs = sorted(self.jobs.values(), key=lambda j: j.last_ts or "", reverse=True)
            return [j.to_json() for j in jobs if status is None or j.status == status][:limit]

    def get(self, job_id: str, *, logs: int) -> dict[str, Any] | None:
        with self.lock:
            job = self.jobs.get(job_id)
            return job.to_json(logs=logs) if job else None


class DashboardState:
    """Everything the API serves; a background thread follows events.jobs and scrapes."""

    def __init__(self, *, settings: Settings, conn: KafkaConnection | None,
                 scorer_urls: list[str], control_url: str | None = None) -> None:
        self.settings = settings
        self.conn = conn
        self.jobs = JobBoard()
        self.drift = DriftBoard()
        self.scorers = ScorerBoard(scorer_urls)
        self.health = HealthBoard(control_url)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.dead_letters = DeadLetterBoard(conn, settings.dfs_root)
        self._topics: tuple[float, list[str] | None] = (0.0, None)
        self.kafka_error: str | None = None

    @property
    def root(self) -> Path:
        return self.settings.dfs_root

    def start(self) -> None:
        if self.conn is not None:
            self._threads.append(threading.Thread(target=self._follow_jobs, daemon=True,
                                                  name="dashboard-jobs"))
            self._threads.append(threading.Thread(target=self._follow_drift, daemon=True,
                                                  name="dashboard-drift"))
        self._threads.append(threading.Thread(target=self._scrape_loop, daemon=True,
                                              name="dashboard-scrape"))
        if self.conn is not None:
            self._threads.append(threading.Thread(target=self._dead_letter_loop, daemon=True,
                                                  name="dashboard-dead-letters"))
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _follow_jobs(self) -> None:
        assert self.conn is not None
        follower = None
        while not self._stop.is_set():
            try:
                if follower is None:
                    # The control plane's topic, under HEADRACE_TOPIC_PREFIX when one is set.
                    follower = Follower(self.conn, [ControlTopics.of(self.settings).jobs])
                for rec in follower.poll(0.5):
                    self.jobs.apply(rec)
                self.kafka_error = None
            except HeadraceError as exc:
                self.kafka_error = str(exc)
                self._stop.wait(2.0)
        if follower is not None:
            follower.close()

    def _follow_drift(self) -> None:
        """The compacted events.drift from its beginning: the latest state per feature."""
        assert self.conn is not None
        follower = None
        while not self._stop.is_set():
            try:
                if follower is None:
                    follower = Follower(self.conn, [ControlTopics.of(self.settings).drift],
                                        from_beginning=True)
                for rec in follower.poll(0.5):
                    self.drift.apply(rec)
            except HeadraceError as exc:
                self.kafka_error = str(exc)
                self._stop.wait(2.0)
        if follower is not None:
            follower.close()

    def _scrape_loop(self) -> None:
        while not self._stop.is_set():
            self.scorers.refresh()
            self.health.refresh(list(self.scorers.urls))
            if time.monotonic() - self._topics[0] >= TOPICS_TTL_S:
                self.refresh_topics()
            self._stop.wait(2.0)

    def job_rows(self, *, limit: int, status: str | None) -> list[dict[str, Any]]:
        """Jobs from the events topic, then those only the DFS knows; each with the gate's
        outcome and its curves' summary from the DFS."""
        listed = self.jobs.list(limit=limit, status=None)
        on_dfs = records.dfs_jobs(self.root, limit=limit)
        seen = {j["job_id"] for j in listed}
        listed += [records.dfs_job_row(self.root, info) for job_id, info in on_dfs.items()
                   if job_id not in seen]
        rows = [records.enrich_job(self.root, row, on_dfs.get(row["job_id"])) for row in listed]
        return [r for r in rows if status is None or r["status"] == status][:limit]

    def refresh_topics(self) -> None:
        """Ask the broker for its topics (from the background loop: never in a request)."""
        if self.conn is None:
            return
        try:
            names: list[str] | None = sorted(list_topics(self.conn))
        except Exception as exc:  # the client's own errors too: shown on the page, not raised
            self.kafka_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            names = None
        self._topics = (time.monotonic(), names)

    def topics(self) -> list[str] | None:
        """The broker's topic names as last seen; None when it could not be asked."""
        return self._topics[1]

    def streams(self) -> list[dict[str, Any]]:
        """Every stream, with its dead letters as last read in the background (None: not yet)."""
        out = all_streams(configured=self.settings.streams, topics=self.topics(),
                          dfs=streams_on_dfs(self.root), scorers=self.scorers.streams())
        counts = self.dead_letters.counts()
        for x in out:
            seen = counts.get(x["name"], {})
            x["dead_letters"], x["dead_letters_error"] = seen.get("count"), seen.get("error")
            if self.conn is None:
                x["dead_letters_error"] = "no Kafka given (--bootstrap): dead letters unknown"
        return out

    def _dead_letter_loop(self) -> None:
        while not self._stop.is_set():
            configured = list(self.settings.streams)
            others = [x["name"] for x in self.streams() if x["name"] not in configured]
            self.dead_letters.refresh(configured + others, self._stop.is_set)
            self._stop.wait(DEAD_LETTERS_EVERY_S)

    def dlq(self, stream: str, *, max_letters: int) -> dict[str, Any]:
        return self.dead_letters.get(stream, max_letters=max_letters)
