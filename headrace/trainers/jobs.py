"""Job identity and the job directory on the DFS: ``jobs/<job_id>/``.

Layout::

    jobs/<job_id>/request.json     the TrainRequested, created with O_EXCL (the dedup arbiter)
    jobs/<job_id>/status.json      state, timestamps, attempts, reason, progress, result
    jobs/<job_id>/log.txt          stdout/stderr of every attempt
    jobs/<job_id>/pod-logs.json    per pod, the last log line copied into log.txt (Kubernetes)
    jobs/<job_id>/checkpoints/<step>/   complete checkpoints (see checkpoints.py)
    jobs/<job_id>/gate.json        the gate that applied, snapshotted when the job was accepted

``status.json`` is the job table operators read (``headrace jobs list/show``); the control
plane's faust table (changelog-backed) holds the same states for the router itself.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from headrace.contracts import JobState, TrainRequested, parse
from headrace.core.errors import PermanentError, RetriableError, ValidationFailed
from headrace.store.dfs import fsync_dir, job_dir, jobs_dir, write_atomic

REQUEST = "request.json"
STATUS = "status.json"
POD_LOG_MARKS = "pod-logs.json"
OWNER = ".owner.lock"  # held by the router that owns the job (Owned)
LOG = "log.txt"
CHECKPOINTS = "checkpoints"
GATE = "gate.json"
CLAIM = ".claim.lock"  # flocked by the router while it creates or takes over the job


def job_id_for(idempotency_key: str) -> str:
    """Deterministic: the same key always names the same job, so dedup is a name clash."""
    return "j-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:12]


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class JobStatus(BaseModel):
    """What ``status.json`` holds."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    model_name: str
    framework: str
    state: JobState = JobState.QUEUED
    created_at: str = Field(default_factory=now_iso)
    started_at: str | None = None
    finished_at: str | None = None
    updated_at: str = Field(default_factory=now_iso)
    attempts: int = 0
    reason: str | None = None
    exit_code: int | None = None
    request_id: str | None = None
    idempotency_key: str | None = None
    trigger: str | None = None
    epoch: int | None = None
    step: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    version: int | None = None
    promoted: bool | None = None
    gate_reasons: list[str] = Field(default_factory=list)
    # promoted | kept (gate passed, not promoted) | refused (the gate held it back, with
    # ``reason`` = the gate's reasons joined by "; " and the rules in ``held_by``); None: old.
    result: str | None = None
    held_by: list[str] = Field(default_factory=list)


def create_request(root: Path, request: TrainRequested) -> tuple[str, bool]:
    """Create ``jobs/<id>/request.json`` exclusively; return (job_id, created).

    ``created`` is False when the job already exists: another delivery of the same event, or
    another control-plane instance, got there first. This is the final dedup arbiter.
    """
    jid = job_id_for(request.idempotency_key)
    d = job_dir(root, jid)
    try:
        d.mkdir(parents=True, exist_ok=True)
        (d / CHECKPOINTS).mkdir(exist_ok=True)
        tmp = d / f".{REQUEST}.{os.getpid()}.tmp"
        tmp.write_bytes(request.model_dump_json(indent=2).encode())
        try:
            # link() fails if the target exists: an O_EXCL create whose content is complete.
            os.link(tmp, d / REQUEST)
            created = True
        except FileExistsError:
            created = False
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(d)
    except OSError as exc:
        if is_permission_error(exc):
            raise DfsNotWritable(f"job {jid}: cannot create its directory: {exc} (the DFS volume "
                                 f"must be writable by uid {os.getuid()}: see fsGroup in "
                                 "docs/topology.md)") from exc
        raise RetriableError(f"job {jid}: cannot create its directory: {exc}") from exc
    return jid, created


@contextmanager
def claim(root: Path, job_id: str) -> Iterator[bool]:
    """Hold ``jobs/<id>/.claim.lock`` (flock, non-blocking) while a router records a job:
    from before ``request.json`` exists until its status, table row and submission are done.

    Yields False when another live router holds it. The kernel drops the lock when its holder
    dies, so a ``request.json`` without a ``status.json`` and with the claim free was left by
    a router killed mid-way: the redelivery takes the job over instead of calling it a
    duplicate (the job would never run)."""
    d = job_dir(root, job_id)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = _try_lock(d / CLAIM)
    except OSError as exc:
        if is_permission_error(exc):
            raise DfsNotWritable(f"job {job_id}: cannot create its directory: {exc} (the DFS "
                                 f"volume must be writable by uid {os.getuid()}: see fsGroup in "
                                 "docs/topology.md)") from exc
        raise RetriableError(f"job {job_id}: cannot create its claim: {exc}") from exc
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _try_lock(path: Path) -> int | None:
    """The descriptor of ``path`` (created if need be) holding its flock, or None when another
    open file holds it; closing the descriptor releases it (so does its holder's death)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class Owned:
    """The jobs this router owns, each by a held ``jobs/<id>/.owner.lock`` (flock), from
    acceptance until the job ends here. A router starting (its table rebuilt from the DFS) or
    recovering never resumes a job another live router owns -- queued in that router's
    executor, or running -- and the kernel frees a dead router's jobs for the next one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fds: dict[str, int] = {}

    def take(self, job_id: str) -> bool:
        """Own the job (True, also when already owned here); False when another owns it."""
        if job_id in self._fds:
            return True
        try:
            fd = _try_lock(job_dir(self.root, job_id) / OWNER)
        except OSError as exc:
            raise RetriableError(f"job {job_id}: cannot open its owner lock: {exc}") from exc
        if fd is None:
            return False
        self._fds[job_id] = fd
        return True

    def release(self, job_id: str) -> None:
        fd = self._fds.pop(job_id, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for jid in list(self._fds):
            self.release(jid)


class DfsNotWritable(PermanentError):
    """The DFS refuses writes (owner, mode, read-only mount): a retry will not help."""


def is_permission_error(exc: OSError) -> bool:
    return exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def read_request(root: Path, job_id: str) -> TrainRequested:
    path = job_dir(root, job_id) / REQUEST
    try:
        return parse(TrainRequested, path.read_bytes())
    except FileNotFoundError:
        raise PermanentError(f"job {job_id} does not exist (no {REQUEST})") from None


def read_status(root: Path, job_id: str) -> JobStatus | None:
    path = job_dir(root, job_id) / STATUS
    try:
        return JobStatus.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise RetriableError(f"job {job_id}: status.json unreadable: {exc}") from None


def write_status(root: Path, status: JobStatus) -> JobStatus:
    status = status.model_copy(update={"updated_at": now_iso()})
    write_atomic(job_dir(root, status.job_id) / STATUS, status.model_dump_json(indent=2).encode())
    return status


def update_status(root: Path, job_id: str, **changes: Any) -> JobStatus:
    current = read_status(root, job_id)
    if current is None:
        req = read_request(root, job_id)
        current = initial_status(job_id, req)
    if current.state == JobState.CANCELLED:
        return current  # final: a stopped attempt's late progress or failure changes nothing
    return write_status(root, current.model_copy(update=changes))


def initial_status(job_id: str, req: TrainRequested) -> JobStatus:
    return JobStatus(
        job_id=job_id, model_name=req.model_name, framework=req.framework.value,
        request_id=req.event_id, idempotency_key=req.idempotency_key,
        trigger=f"{req.trigger.kind.value}:{req.trigger.source}")


def list_jobs(root: Path) -> list[JobStatus]:
    """Every job on the DFS, newest first."""
    base = jobs_dir(root)
    out: list[JobStatus] = []
    if not base.is_dir():
        return out
    for d in base.iterdir():
        if d.name.startswith(".") or not d.is_dir():
            continue
        try:
            st = read_status(root, d.name)
        except (RetriableError, ValidationFailed):
            continue
        if st is None and (d / REQUEST).exists():
            try:
                st = initial_status(d.name, read_request(root, d.name))
            except PermanentError:
                continue
        if st is not None:
            out.append(st)
    return sorted(out, key=lambda s: s.created_at, reverse=True)


def log_path(root: Path, job_id: str) -> Path:
    return job_dir(root, job_id) / LOG


def append_pod_log(root: Path, job_id: str, pod: str,
                   lines: Sequence[tuple[str, int, str]]) -> int:
    """Append a pod's log lines -- (timestamp, place among the pod's lines of that instant,
    text), in order -- to the job's log, each once: lines at or before the pod's last appended
    (``pod-logs.json``) were appended by this or an earlier control plane (one restarted, or
    re-adopting the job) and are skipped. How many were appended."""
    marks_path = job_dir(root, job_id) / POD_LOG_MARKS
    try:
        got = json.loads(marks_path.read_text())
        marks: dict[str, Any] = got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        marks = {}
    last = marks.get(pod)
    after = (str(last[0]), int(last[1])) if isinstance(last, list) and len(last) == 2 else None
    # RFC 3339 times of one pod sort as strings.
    new = [(ts, seq, text) for ts, seq, text in lines if after is None or (ts, seq) > after]
    if not new:
        return 0
    with open(log_path(root, job_id), "a", encoding="utf-8") as f:
        f.write("".join(text.rstrip("\n") + "\n" for _, _, text in new))
    ts, seq, _ = max(new)
    write_json(marks_path, {**marks, pod: [ts, seq]})
    return len(new)


def checkpoints_dir(root: Path, job_id: str) -> Path:
    return job_dir(root, job_id) / CHECKPOINTS


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True).encode())
