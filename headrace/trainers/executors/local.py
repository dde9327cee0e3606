"""The local executor: one subprocess per job, a concurrency limit per framework, a timeout,
and retries with exponential backoff for retriable failures (see ``base.ExitCode``).

A distributed job (``resources.workers > 1`` or parameter servers) runs as a whole gang of
local processes (:mod:`headrace.trainers.distributed.gang`); if one member dies the gang is
stopped and the attempt counts as failed, so a retry restarts all of it from the last
complete checkpoint."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from headrace.contracts import JobState
from headrace.core.errors import HeadraceError
from headrace.trainers import jobs
from headrace.trainers.distributed.gang import LocalGang, member_specs
from headrace.trainers.distributed.heartbeat import verdict
from headrace.trainers.distributed.plan import plan_of
from headrace.trainers.executors.base import (
    ExitCode,
    JobOutcome,
    JobSpec,
    is_retriable,
    job_command,
    ps_node_command,
)

ENTRYPOINT_ERROR = "headrace job: "  # what ``python -m headrace.trainers`` prefixes
RetryHook = Callable[[str, int, str, float], None]  # job_id, next attempt, reason, delay_s
StartHook = Callable[[str, int, int], None]  # job_id, attempt, pid


@dataclass
class _Job:
    spec: JobSpec
    attempts: int = 0
    not_before: float = 0.0
    proc: subprocess.Popen[bytes] | LocalGang | None = None
    log: IO[bytes] | None = None
    started: float = 0.0
    started_wall: float = 0.0  # time.time() at start: heartbeats older than this are stale
    cancelled: bool = False
    hung: str | None = None  # why the watchdog stopped the attempt (start-up or freeze)


@dataclass
class LocalExecutor:
    """Runs ``python -m headrace.trainers run JOB_ID`` with the job's own log file."""

    root: Path
    bootstrap: str | None = None
    topic_prefix: str = ""
    concurrency: dict[str, int] = field(default_factory=lambda: {"tensorflow": 1, "mxnet": 1})
    timeout_s: float = 3600.0
    max_attempts: int = 3
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    on_retry: RetryHook | None = None
    on_start: StartHook | None = None
    grace_s: float = 5.0
    # A member that stepped and then made no training step (heartbeat) for this long: the
    # attempt is hung and restarted from its last checkpoint (None: no watchdog).
    watchdog_s: float | None = 600.0
    # No member's first training step this long after the launch: the same (None: off).
    startup_s: float | None = 1800.0
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)  # shared by a gang's workers
    _jobs: dict[str, _Job] = field(default_factory=dict)

    def submit(self, job: JobSpec) -> None:
        if job.job_id not in self._jobs:
            self._jobs[job.job_id] = _Job(job, attempts=job.attempts_done)
            self._start_ready(self.clock())  # start now, not at the next poll

    def active(self) -> list[str]:
        return list(self._jobs)

    def running(self) -> list[str]:
        return [j for j, s in self._jobs.items() if s.proc is not None]

    def backoff(self, attempt: int) -> float:
        """Delay before attempt ``attempt + 1``: backoff_s * 2**(attempt-1), capped."""
        return float(min(self.backoff_max_s, self.backoff_s * 2 ** max(0, attempt - 1)))

    def poll(self) -> list[JobOutcome]:
        now = self.clock()
        ended: list[JobOutcome] = []
        for jid, st in list(self._jobs.items()):
            if st.proc is None:
                continue
            code = st.proc.poll()
            timed_out = code is None and now - st.started > self.timeout_s
            if code is None and not timed_out:
                st.hung = verdict(self.root, jid, since=st.started_wall,
                                  watchdog_s=self.watchdog_s, startup_s=self.startup_s)
                if st.hung is not None:
                    self._log_line(st, f"watchdog: {st.hung}: stopping attempt {st.attempts}")
            if timed_out or st.hung is not None:
                self._terminate(st, kill=st.hung is not None)
                code = st.proc.returncode
            if code is None:
                continue
            self._close_log(st)
            st.proc = None
            reason = self._reason(jid, code, timed_out, st.hung)
            retriable = timed_out or st.hung is not None or is_retriable(code)
            st.hung = None
            if st.cancelled:
                ended.append(JobOutcome(jid, False, code, st.attempts, "cancelled"))
                del self._jobs[jid]
            elif code == ExitCode.OK:
                ended.append(JobOutcome(jid, True, code, st.attempts))
                del self._jobs[jid]
            elif retriable and st.attempts < self.max_attempts:
                delay = self.backoff(st.attempts)
                st.not_before = now + delay
                if self.on_retry is not None:
                    self.on_retry(jid, st.attempts + 1, reason, delay)
            else:
                if retriable:
                    reason = f"{reason} (gave up after {st.attempts} attempts)"
                ended.append(JobOutcome(jid, False, code, st.attempts, reason))
                del self._jobs[jid]
        self._start_ready(now)
        return ended

    def _start_ready(self, now: float) -> None:
        busy: dict[str, int] = {}
        for st in self._jobs.values():
            if st.proc is not None:
                fw = st.spec.framework.value
                busy[fw] = busy.get(fw, 0) + 1
        for st in self._jobs.values():
            fw = st.spec.framework.value
            if st.proc is not None or st.not_before > now:
                continue
            if busy.get(fw, 0) >= self.concurrency.get(fw, 1):
                continue
            self._start(st, now)
            busy[fw] = busy.get(fw, 0) + 1

    def _start(self, st: _Job, now: float) -> None:
        jid = st.spec.job_id
        env = dict(os.environ)
        env["HEADRACE_DFS_ROOT"] = str(self.root)
        if self.bootstrap:
            env["HEADRACE_BOOTSTRAP"] = self.bootstrap
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONUNBUFFERED"] = "1"
        env["HEADRACE_JOB_ID"] = jid  # how a restarted control plane recognises the gang
        st.log = open(jobs.log_path(self.root, jid), "ab")  # noqa: SIM115 - closed on exit
        st.attempts += 1
        st.log.write(f"--- attempt {st.attempts} ---\n".encode())
        st.log.flush()
        env["HEADRACE_JOB_ATTEMPT"] = str(st.attempts)  # the job reports this attempt number
        gang = self._gang(jid, env, st.log)
        if gang is not None:
            st.proc = gang
        else:
            st.proc = subprocess.Popen(
                job_command(jid, topic_prefix=self.topic_prefix), stdout=st.log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True)  # its own group: a timeout kills the whole tree
        st.started = now
        st.started_wall = time.time()
        self._mark_started(st)
        if self.on_start is not None:
            self.on_start(jid, st.attempts, st.proc.pid)

    def _mark_started(self, st: _Job) -> None:
        """``status.json`` says running, with this attempt, from the launch on: a gang
        member may block long before the chief writes its own status (ps-lite start-up)."""
        try:
            jobs.update_status(self.root, st.spec.job_id, state=JobState.RUNNING,
                               attempts=st.attempts, started_at=jobs.now_iso(), reason=None,
                               exit_code=None)
        except (HeadraceError, OSError) as exc:  # the job writes it too once it runs
            self._log_line(st, f"executor: cannot mark attempt {st.attempts} started: {exc}")

    def _gang(self, jid: str, env: dict[str, str], log: IO[bytes]) -> LocalGang | None:
        """The job's gang when its request asks for one (None: a single process, which also
        reports a request that cannot be read or planned, with its one-line reason)."""
        try:
            plan = plan_of(jobs.read_request(self.root, jid))
        except HeadraceError:
            return None
        if not plan.distributed:
            return None
        specs = member_specs(plan, worker_argv=job_command(jid, topic_prefix=self.topic_prefix),
                             ps_argv=ps_node_command(), cpus=self.cpus)
        return LocalGang(specs, base_env=env, log=log)

    def pids_of(self, job_id: str) -> dict[str, int]:
        """The running gang's pids by member tag (``w0``, ``w1``, ``s0``...); a single job's
        process is ``w0``."""
        st = self._jobs.get(job_id)
        if st is None or st.proc is None:
            return {}
        return st.proc.pids() if isinstance(st.proc, LocalGang) else {"w0": st.proc.pid}

    def _reason(self, jid: str, code: int, timed_out: bool, hung: str | None = None) -> str:
        if timed_out:
            return f"timed out after {self.timeout_s:.0f}s"
        if hung is not None:
            return hung
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        try:
            status = jobs.read_status(self.root, jid)
        except Exception:
            status = None
        if status is not None and status.reason and status.exit_code == code:
            return status.reason
        last = _last_error_line(jobs.log_path(self.root, jid))
        return last or f"exited with code {code}"

    def _log_line(self, st: _Job, line: str) -> None:
        if st.log is not None:
            with contextlib.suppress(OSError, ValueError):
                st.log.write(f"{line}\n".encode())
                st.log.flush()

    def _terminate(self, st: _Job, *, kill: bool = False) -> None:
        """SIGTERM then SIGKILL after the grace period; ``kill``: SIGKILL at once (a hung,
        perhaps stopped, gang would never act on SIGTERM)."""
        assert st.proc is not None
        if isinstance(st.proc, LocalGang):
            st.proc.stop(0 if kill else self.grace_s)
            return
        try:
            os.killpg(st.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            st.proc.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(st.proc.pid, signal.SIGKILL)
            st.proc.wait()
        except ProcessLookupError:
            st.proc.wait()

    def _close_log(self, st: _Job) -> None:
        if st.log is not None:
            st.log.close()
            st.log = None

    def cancel(self, job_id: str) -> bool:
        st = self._jobs.get(job_id)
        if st is None:
            return False
        if st.proc is None:
            del self._jobs[job_id]
        else:
            st.cancelled = True
            self._terminate(st)
        return True

    # -- adoption (see base.Adopting) ------------------------------------------------------

    def handle(self, job_id: str) -> dict[str, Any] | None:
        """The running attempt's process groups (every member leads its own session)."""
        st = self._jobs.get(job_id)
        if st is None or st.proc is None:
            return None
        pids = st.proc.pids() if isinstance(st.proc, LocalGang) else {"w0": st.proc.pid}
        return {"kind": "local", "attempt": st.attempts, "pgids": sorted(pids.values())}

    def adopt(self, job: JobSpec, handle: Mapping[str, Any]) -> bool:
        # A process another control plane started is not our child: no exit code, no log
        # pipe. It cannot be supervised, so it is reaped and the job resumes from its
        # last complete checkpoint.
        return False

    def reap(self, job_id: str, handle: Mapping[str, Any]) -> None:
        """SIGKILL each process group of ``handle`` that still runs this job (its leader's
        environment names the job: a recycled pid is left alone), and wait until gone."""
        groups = [int(g) for g in handle.get("pgids", []) if _runs_job(int(g), job_id)]
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_group_alive(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pid_of(self, job_id: str) -> int | None:
        st = self._jobs.get(job_id)
        return st.proc.pid if st is not None and st.proc is not None else None

    def close(self) -> None:
        for st in self._jobs.values():
            if st.proc is not None and st.proc.poll() is None:
                self._terminate(st)
            self._close_log(st)


def _runs_job(pid: int, job_id: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"HEADRACE_JOB_ID={job_id}".encode() in environ.split(b"\0")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie leader (reaped by nobody yet) still counts as a group: look at its state.
    try:
        stat = Path(f"/proc/{pgid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _last_error_line(path: Path) -> str:
    """The job's last ERROR log line of this attempt (the job logs its reason there), or the
    entrypoint's one-line error (bad settings)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            tail = f.read().decode("utf-8", "replace").split("--- attempt ")[-1]
    except OSError:
        return ""
    for line in reversed(tail.splitlines()):
        if " ERROR " in line:
            return line.split(" ERROR ", 1)[1].strip()
        if line.startswith(ENTRYPOINT_ERROR):  # the job's entrypoint failed before logging
            return line.removeprefix(ENTRYPOINT_ERROR).strip()
    return ""
