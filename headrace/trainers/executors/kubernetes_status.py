"""Reading a training attempt's state: its Job's (or gang's, or JobSet's) status as one
``active``/``failed``/``ready``/conditions record, and what its pods say (the trainer's exit
code, a disruption, the scheduler's reason for a Pending pod, a gang member's tag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headrace.trainers.executors.kubernetes_objects import CONTAINER, TrainingJobSpec

NOT_YET = object()  # a Job just created that the watch has not shown yet


def member_tag(spec: TrainingJobSpec, pod: str) -> str | None:
    """``w1``, ``s0`` or ``sched`` for a gang's pod (``<attempt>-<role>-0-<index>-<suffix>``),
    else None."""
    if spec.pods == 1:
        return None
    for role, tag in (("worker", "w"), ("server", "s"), ("scheduler", "sched")):
        prefix = f"{spec.job_name}-{role}-0-"
        index = pod[len(prefix):].split("-", 1)[0] if pod.startswith(prefix) else ""
        if index.isdecimal():
            return tag if role == "scheduler" else f"{tag}{index}"
    return None


def ending(st: Any) -> bool:
    return any(c.type in ("Failed", "FailureTarget") and c.status == "True"
               for c in (st.conditions or []))


def unscheduled(pods: list[Any]) -> str | None:
    """``Reason: message`` of the first Pending pod the scheduler refused (``PodScheduled``
    False), e.g. ``Unschedulable: 0/6 nodes are available: 6 Insufficient nvidia.com/gpu``."""
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        if not pod.status or pod.status.phase != "Pending":
            continue
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return f"{cond.reason or 'Unschedulable'}: {cond.message or ''}".strip(": ")
    return None


def selector(spec: TrainingJobSpec) -> str:
    sel = f"headrace.io/job={spec.name}"
    return f"{sel},headrace.io/attempt={spec.attempt}" if spec.pods > 1 else sel


@dataclass(frozen=True)
class Cond:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Status:
    active: int
    failed: int
    conditions: list[Cond]
    ready: int | None = None  # None: not reported (JobSet), ``active`` stands in


def running(st: Any) -> int:
    """Pods running: the Job's ``ready`` count. ``active`` also counts pods still Pending
    (waiting for a GPU, unschedulable), so a job waiting for capacity is not "started" and its
    startup watchdog does not run (D50)."""
    ready = getattr(st, "ready", None)
    return int(ready) if ready is not None else int(st.active or 0)


def exit_code(pods: list[Any]) -> int | None:
    """The trainer's last exit code, read from the attempt's pods (None if none terminated)."""
    codes: list[tuple[str, int]] = []
    for pod in pods:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            term = cs.state.terminated if cs.state else None
            if cs.name == CONTAINER and term is not None and term.exit_code:
                codes.append((str(term.finished_at or ""), int(term.exit_code)))
    return max(codes)[1] if codes else None


def disrupted(pods: list[Any]) -> bool:
    """A member of the attempt was preempted, evicted or drained (``DisruptionTarget``)."""
    for pod in pods:
        for cond in (getattr(pod.status, "conditions", None) or []) if pod.status else []:
            if cond.type == "DisruptionTarget" and cond.status == "True":
                return True
    return False


def jobset_status(got: dict[str, Any]) -> Status:
    """A JobSet's status as one Job's (it reports no ready count)."""
    st = got.get("status") or {}
    rjs = st.get("replicatedJobsStatus") or []
    conds = [Cond("Complete" if c.get("type") == "Completed" else str(c.get("type")),
                  str(c.get("status")), c.get("reason"), c.get("message"))
             for c in st.get("conditions") or [] if c.get("type") in ("Completed", "Failed")]
    return Status(sum(int(r.get("active") or 0) for r in rjs),
                  max((int(r.get("failed") or 0) for r in rjs), default=0), conds)


def gang_status(statuses: list[Any]) -> Any:
    """The role Jobs of one attempt as one Job: it completes when its workers (the first
    role) do and fails when any role does."""
    if len(statuses) == 1:
        return statuses[0]
    done = [c for c in (statuses[0].conditions or []) if c.type == "Complete"]
    failed = [c for st in statuses for c in (st.conditions or []) if c.type == "Failed"]
    readies = [getattr(st, "ready", None) for st in statuses]
    return Status(sum(int(st.active or 0) for st in statuses),
                  max(int(st.failed or 0) for st in statuses), done + failed,
                  None if None in readies else sum(int(r) for r in readies if r))
