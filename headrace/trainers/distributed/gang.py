"""A whole gang as local processes: N workers, plus a scheduler and M servers for parameter
servers, on free loopback ports; all or nothing.

Every member's output goes to the job's log, each line prefixed with its tag (``[w0] ...``,
``[s0] ...``, ``[sched] ...``). :meth:`LocalGang.poll` reports the gang's end: success when
every worker exited 0, otherwise the first failure -- and then every other member is stopped,
so the executor can restart the whole gang from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from headrace.core.ports import LOOPBACK, free_ports
from headrace.trainers.distributed.peers import (
    dmlc_env,
    member_env,
    tf_config,
    thread_env,
    threads_per_worker,
)
from headrace.trainers.distributed.plan import GangPlan


@dataclass(frozen=True)
class MemberSpec:
    tag: str
    role: str
    argv: Sequence[str]
    env: Mapping[str, str]


def member_specs(plan: GangPlan, *, worker_argv: Sequence[str], ps_argv: Sequence[str],
                 cpus: int) -> list[MemberSpec]:
    """What to start for ``plan`` on this machine (workers first; worker 0 is the chief)."""
    threads = thread_env(threads_per_worker(cpus, plan.workers))
    out: list[MemberSpec] = []
    if plan.kind == "allreduce":
        addrs = [f"{LOOPBACK}:{p}" for p in free_ports(plan.workers)]
        for i in range(plan.workers):
            env = {**member_env(role="worker", index=i, workers=plan.workers,
                                strategy=plan.kind), **threads,
                   "TF_CONFIG": tf_config(addrs, i)}
            out.append(MemberSpec(f"w{i}", "worker", worker_argv, env))
        return out
    [root_port] = free_ports(1)
    ps = dict(root_host=LOOPBACK, root_port=root_port, workers=plan.workers,
              servers=plan.servers)
    for i in range(plan.workers):
        env = {**member_env(role="worker", index=i, workers=plan.workers, strategy=plan.kind),
               **threads, **dmlc_env("worker", **ps)}  # type: ignore[arg-type]
        out.append(MemberSpec(f"w{i}", "worker", worker_argv, env))
    one = thread_env(1)
    out.append(MemberSpec("sched", "scheduler", ps_argv,
                          {**one, **dmlc_env("scheduler", **ps)}))  # type: ignore[arg-type]
    for i in range(plan.servers):
        out.append(MemberSpec(f"s{i}", "server", ps_argv,
                              {**one, **dmlc_env("server", **ps)}))  # type: ignore[arg-type]
    return out


class _Member:
    def __init__(self, spec: MemberSpec, base_env: Mapping[str, str], log: IO[bytes],
                 lock: threading.Lock) -> None:
        self.spec = spec
        self.proc = subprocess.Popen(
            list(spec.argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env={**base_env, **spec.env}, start_new_session=True)
        self.pump = threading.Thread(target=self._pump, args=(log, lock), daemon=True)
        self.pump.start()

    def _pump(self, log: IO[bytes], lock: threading.Lock) -> None:
        prefix = f"[{self.spec.tag}] ".encode()
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with lock, contextlib.suppress(ValueError, OSError):  # the log closed under us
                log.write(prefix + line)
                log.flush()


class LocalGang:
    """The running gang; ``pid`` is the chief's (what an executor reports)."""

    def __init__(self, specs: Sequence[MemberSpec], *, base_env: Mapping[str, str],
                 log: IO[bytes]) -> None:
        self._lock = threading.Lock()
        self.members: list[_Member] = []
        try:
            for s in specs:
                self.members.append(_Member(s, base_env, log, self._lock))
        except OSError:
            self.stop(0)
            raise
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.members[0].proc.pid

    def pids(self) -> dict[str, int]:
        return {m.spec.tag: m.proc.pid for m in self.members}

    def poll(self) -> int | None:
        """None while running; else the gang's exit code (0, or the first failure's)."""
        if self.returncode is not None:
            return self.returncode
        workers = [m for m in self.members if m.spec.role == "worker"]
        codes = [m.proc.poll() for m in workers]
        failed = [(m, c) for m, c in zip(workers, codes, strict=True) if c not in (None, 0)]
        others_dead = [m for m in self.members if m.spec.role != "worker"
                       and m.proc.poll() not in (None, 0)]
        if failed or (others_dead and None in codes):
            # The chief's code says most (65: permanent); else the first member that failed.
            chief = [c for m, c in failed if m.spec.tag == "w0"]
            code = chief[0] if chief else (failed[0][1] if failed else
                                           others_dead[0].proc.returncode)
            self.returncode = int(code if code is not None else 75)
            self.stop(2.0)
            return self.returncode
        if all(c == 0 for c in codes):
            self.returncode = 0
            self.stop(5.0)  # servers and the scheduler end with the workers; make sure
            return 0
        return None

    def stop(self, grace_s: float) -> None:
        """SIGTERM every member's process group, SIGKILL what is left after ``grace_s``."""
        for m in self.members:
            if m.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(m.proc.pid, signal.SIGTERM)
        for m in self.members:
            try:
                m.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(m.proc.pid, signal.SIGKILL)
                m.proc.wait()
        for m in self.members:
            m.pump.join(2.0)
        if self.returncode is None:
            self.returncode = -int(signal.SIGTERM)
