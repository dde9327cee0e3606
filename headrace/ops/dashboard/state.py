"""What the dashboard shows, gathered from where it lives: the events.jobs topic (job
lifecycle, progress, logs), the DFS (job dirs, the model store), the scorers' /metrics
endpoints, and the dead-letter topics. Every reader is defensive: a missing or malformed source
shows as empty or as an error line, never as a crashed dashboard."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.contracts import JobEvent, JobEventKind, parse
from headrace.core.errors import HeadraceError, ValidationFailed
from headrace.core.naming import check_name
from headrace.core.settings import Settings
from headrace.store import versions
from headrace.store.dfs import jobs_dir
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import Follower, Record
from headrace.streams.topics import JOB_EVENTS

MAX_LOG_LINES = 500
_TERMINAL = {JobEventKind.SUCCEEDED: "succeeded", JobEventKind.FAILED: "failed"}


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


def dfs_jobs(root: Path, *, limit: int) -> dict[str, dict[str, Any]]:
    """job id -> what its DFS directory says (status.json, request.json), newest first."""
    base = jobs_dir(root)
    if not base.is_dir():
        return {}
    dirs = sorted((d for d in base.iterdir() if d.is_dir() and not d.name.startswith(".")),
                  key=lambda d: d.stat().st_mtime, reverse=True)[:limit]
    out: dict[str, dict[str, Any]] = {}
    for d in dirs:
        info: dict[str, Any] = {"job_id": d.name}
        for name in ("status.json", "request.json"):
            try:
                data = json.loads((d / name).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                info[name.removesuffix(".json")] = data
        out[d.name] = info
    return out


def job_log_file(root: Path, job_id: str, *, lines: int) -> list[str]:
    """The tail of a job's log file on the DFS, if it wrote one."""
    d = jobs_dir(root) / check_name(job_id, what="job id")
    for name in ("job.log", "log.txt", "train.log"):
        f = d / name
        if f.is_file():
            with open(f, "rb") as fh:
                fh.seek(max(0, f.stat().st_size - 256 * 1024))
                return fh.read().decode("utf-8", "replace").splitlines()[-lines:]
    return []


def models(root: Path) -> list[dict[str, Any]]:
    out = []
    for name in versions.list_models(root):
        prod = _alias(root, name)
        vs = []
        for v in versions.list_versions(root, name):
            try:
                m, _ = versions.read_manifest(versions.model_dir(root, name) / str(v))
            except HeadraceError as exc:
                vs.append({"version": v, "error": str(exc)})
                continue
            vs.append({"version": v, "framework": m.framework.value, "task": m.task.value,
                       "metrics": m.metrics, "created_at": m.created_at.isoformat(),
                       "job_id": m.job_id, "production": prod == v,
                       "has_confusion_matrix": bool(m.confusion_matrix)})
        out.append({"name": name, "production": prod, "versions": vs})
    return out


def _alias(root: Path, name: str) -> int | None:
    try:
        pointer = versions.read_alias(root, name)
    except HeadraceError:
        return None
    return pointer.version if pointer else None


def model_version(root: Path, name: str, version: int) -> dict[str, Any]:
    path = versions.model_dir(root, name) / str(version)
    if not path.is_dir():
        raise versions.VersionNotFound(f"model {name} has no version {version}")
    m, digest = versions.read_manifest(path)
    return {"name": name, "version": version, "framework": m.framework.value,
            "task": m.task.value, "features": list(m.features), "label": m.label,
            "classes": list(m.classes), "metrics": m.metrics,
            "confusion_matrix": m.confusion_matrix, "created_at": m.created_at.isoformat(),
            "job_id": m.job_id, "dataset": m.dataset.model_dump() if m.dataset else None,
            "manifest_sha256": digest, "production": _alias(root, name) == version,
            "history": [p.__dict__ for p in versions.alias_history(root, name)][-20:]}


# --- scorers: Prometheus text from each scorer's /metrics -----------------------------------


@dataclass
class ScorerSample:
    at: float
    rows: float | None
    predictions: float | None
    dead_letters: float | None
    lag: float | None
    latency_p50: float | None
    latency_p99: float | None
    model: str | None
    ready: float | None


def scrape(url: str, *, timeout_s: float = 2.0) -> ScorerSample:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        text = resp.read(4 * 1024 * 1024).decode("utf-8", "replace")
    rows = preds = dead = lag = ready = None
    model: str | None = None
    buckets: list[tuple[float, float]] = []
    for fam in text_string_to_metric_families(text):
        name = fam.name
        if name.endswith("_created"):
            # The classic text format adds a `<counter>_created` gauge (a Unix time) per
            # counter; `model_swaps_created{model=...}` is not the model's version.
            continue
        for s in fam.samples:
            sname, labels, value = s.name, s.labels, float(s.value)
            if fam.type == "counter" and sname.endswith("_total"):
                if "dead" in name or "dlq" in name:
                    dead = (dead or 0.0) + value
                elif "prediction" in name:
                    preds = (preds or 0.0) + value
                elif "rows" in name or "records" in name:
                    rows = (rows or 0.0) + value
            elif fam.type == "gauge":
                if "lag" in name:
                    lag = (lag or 0.0) + value
                elif "ready" in name:
                    ready = value
                elif name.endswith("model_version"):
                    # The gauge's value is the manifest version; the label names the model.
                    who = labels.get("model", labels.get("name"))
                    model = f"{who}:{int(value)}" if who else str(int(value))
            elif fam.type == "histogram" and "latency" in name and sname.endswith("_bucket"):
                le = labels.get("le", "+Inf")
                buckets.append((float("inf") if le == "+Inf" else float(le), value))
    p50, p99 = _quantiles(buckets)
    return ScorerSample(time.monotonic(), rows, preds, dead, lag, p50, p99, model, ready)


def _quantiles(buckets: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    merged: dict[float, float] = {}
    for le, v in buckets:
        merged[le] = merged.get(le, 0.0) + v
    points = sorted(merged.items())
    if not points or points[-1][1] <= 0:
        return None, None
    total = points[-1][1]

    def q(f: float) -> float:
        for le, c in points:
            if c >= f * total:
                return le if le != float("inf") else points[-2][0] if len(points) > 1 else 0.0
        return points[-1][0]

    return q(0.5), q(0.99)


class ScorerBoard:
    """Last two scrapes per scorer URL, to turn counters into rates."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = list(urls)
        self.last: dict[str, ScorerSample] = {}
        self.prev: dict[str, ScorerSample] = {}
        self.errors: dict[str, str] = {}
        self.lock = threading.Lock()

    def add(self, url: str) -> None:
        with self.lock:
            if url not in self.urls:
                self.urls.append(url)

    def refresh(self) -> None:
        for url in list(self.urls):
            try:
                sample = scrape(url)
            except Exception as exc:
                with self.lock:
                    self.errors[url] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            with self.lock:
                if url in self.last:
                    self.prev[url] = self.last[url]
                self.last[url] = sample
                self.errors.pop(url, None)

    def view(self) -> list[dict[str, Any]]:
        out = []
        with self.lock:
            for url in self.urls:
                s, p = self.last.get(url), self.prev.get(url)
                row: dict[str, Any] = {"url": url, "error": self.errors.get(url)}
                if s is not None:
                    row.update(rows_total=s.rows, predictions_total=s.predictions,
                               dead_letters_total=s.dead_letters, lag=s.lag,
                               latency_p50_s=s.latency_p50, latency_p99_s=s.latency_p99,
                               model=s.model, ready=s.ready, rows_per_s=None)
                    if p is not None and s.rows is not None and p.rows is not None \
                            and s.at > p.at:
                        row["rows_per_s"] = max(0.0, (s.rows - p.rows) / (s.at - p.at))
                out.append(row)
        return out


class DashboardState:
    """Everything the API serves; a background thread follows events.jobs and scrapes."""

    def __init__(self, *, settings: Settings, conn: KafkaConnection | None,
                 scorer_urls: list[str]) -> None:
        self.settings = settings
        self.conn = conn
        self.jobs = JobBoard()
        self.scorers = ScorerBoard(scorer_urls)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._dlq_cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self.kafka_error: str | None = None

    @property
    def root(self) -> Path:
        return self.settings.dfs_root

    def start(self) -> None:
        if self.conn is not None:
            self._threads.append(threading.Thread(target=self._follow_jobs, daemon=True,
                                                  name="dashboard-jobs"))
        self._threads.append(threading.Thread(target=self._scrape_loop, daemon=True,
                                              name="dashboard-scrape"))
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
                    follower = Follower(self.conn, [JOB_EVENTS])
                for rec in follower.poll(0.5):
                    self.jobs.apply(rec)
                self.kafka_error = None
            except HeadraceError as exc:
                self.kafka_error = str(exc)
                self._stop.wait(2.0)
        if follower is not None:
            follower.close()

    def _scrape_loop(self) -> None:
        while not self._stop.is_set():
            self.scorers.refresh()
            self._stop.wait(2.0)

    def dlq(self, stream: str, *, max_letters: int) -> dict[str, Any]:
        from headrace.ops import deadletters

        if self.conn is None:
            return {"stream": stream, "error": "no Kafka configured", "groups": [], "letters": []}
        key = f"{stream}:{max_letters}"
        cached = self._dlq_cache.get(key)
        if cached and time.monotonic() - cached[0] < 2.0:
            return cached[1]
        try:
            letters = deadletters.read_letters(self.conn, stream, timeout_s=10)
        except ValidationFailed as exc:
            return {"stream": stream, "error": str(exc), "count": 0, "groups": [], "letters": []}
        ledger = deadletters.load_ledger(self.root, stream)
        data = {"stream": stream, "error": None, "count": len(letters),
                "groups": [g.__dict__ for g in deadletters.summarize(letters, ledger)],
                "letters": [{**lt.to_json(preview=200), "redriven": bool(ledger.redriven(lt))}
                            for lt in letters[-max_letters:]] if max_letters else []}
        self._dlq_cache[key] = (time.monotonic(), data)
        return data
