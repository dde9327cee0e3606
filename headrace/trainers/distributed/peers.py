"""What each gang member is told about itself and its peers, as environment variables.

Every member of a distributed job gets ``HEADRACE_GANG_ROLE`` (worker | server | scheduler),
``HEADRACE_STRATEGY``, ``HEADRACE_WORKERS`` and, for workers, ``HEADRACE_WORKER_INDEX`` (0 is the
chief). All-reduce workers also get ``TF_CONFIG``; parameter-server members get ``DMLC_*``. The
local executor fills in loopback ports, the Kubernetes executor the headless Service's DNS names.
:class:`GangMember` is read once at the job's entrypoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from headrace.core.errors import ConfigError

Role = Literal["worker", "server", "scheduler"]


class GangMember(BaseModel):
    """This process's place in the gang (a single-process job is worker 0 of 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role = "worker"
    index: int = Field(default=0, ge=0)
    workers: int = Field(default=1, ge=1)
    strategy: Literal["none", "allreduce", "parameter_server"] = "none"
    threads: int | None = Field(default=None, ge=1)

    @property
    def chief(self) -> bool:
        return self.index == 0

    @property
    def distributed(self) -> bool:
        return self.strategy != "none"

    @property
    def tag(self) -> str:
        """The prefix of this member's log lines: ``w1``, ``s0``, ``sched``."""
        return {"worker": f"w{self.index}", "server": f"s{self.index}",
                "scheduler": "sched"}[self.role]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GangMember:
        try:
            return cls(role=env.get("HEADRACE_GANG_ROLE", "worker"),
                       index=int(env.get("HEADRACE_WORKER_INDEX", "0")),
                       workers=int(env.get("HEADRACE_WORKERS", "1")),
                       strategy=env.get("HEADRACE_STRATEGY", "none"),
                       threads=int(env["HEADRACE_THREADS"]) if env.get("HEADRACE_THREADS")
                       else None)
        except (ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise ConfigError(f"invalid gang environment (HEADRACE_GANG_ROLE, "
                              f"HEADRACE_WORKER_INDEX, HEADRACE_WORKERS...): {first}") from None


def threads_per_worker(cpus: int, members: int) -> int:
    """CPU threads for each of ``members`` processes sharing ``cpus`` cores (at least 1)."""
    return max(1, cpus // max(1, members))


def thread_env(threads: int) -> dict[str, str]:
    """Caps every thread pool the frameworks start, so N workers do not oversubscribe a box."""
    n = str(threads)
    return {"HEADRACE_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n, "TF_NUM_INTRAOP_THREADS": n,
            "TF_NUM_INTEROP_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": n,
            "MXNET_OMP_MAX_THREADS": n}


def tf_config(workers: list[str], index: int | str) -> str:
    """TF_CONFIG for worker ``index`` of ``workers`` (``host:port`` each). ``index`` may be a
    shell placeholder: it is written bare, unquoted."""
    text = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker",
                                                                "index": "__INDEX__"}},
                      separators=(",", ":"))
    return text.replace('"__INDEX__"', str(index))


def rendezvous(env: Mapping[str, str]) -> tuple[str, int]:
    """Worker 0's ``host:port`` from ``TF_CONFIG``: where a torch gang's store listens."""
    try:
        host, _, port = json.loads(env["TF_CONFIG"])["cluster"]["worker"][0].rpartition(":")
        return host, int(port)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid gang environment: TF_CONFIG names no worker 0 "
                          f"host:port ({type(exc).__name__})") from None


def dmlc_env(role: Role, *, root_host: str, root_port: int, workers: int,
             servers: int) -> dict[str, str]:
    """ps-lite's environment: every member names the scheduler (the root) and the counts."""
    return {"DMLC_ROLE": role, "DMLC_PS_ROOT_URI": root_host, "DMLC_PS_ROOT_PORT": str(root_port),
            "DMLC_NUM_WORKER": str(workers), "DMLC_NUM_SERVER": str(servers)}


def member_env(*, role: Role, index: int, workers: int, strategy: str) -> dict[str, str]:
    return {"HEADRACE_GANG_ROLE": role, "HEADRACE_WORKER_INDEX": str(index),
            "HEADRACE_WORKERS": str(workers), "HEADRACE_STRATEGY": strategy}
