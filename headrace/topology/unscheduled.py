"""Why Headrace's pods are not running where the plan put them: the scheduler's own reason.

A plan can be right on paper and still not fit the live cluster (a node's GPUs taken, a
label gone, a volume on another node). The scheduler then leaves the pod Pending with a
``PodScheduled=False`` condition saying which nodes failed which check; ``topology explain
--live`` prints it next to the plan's own reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headrace.core.errors import ConfigError, RetriableError

SELECTOR = "app.kubernetes.io/name=headrace"


@dataclass(frozen=True)
class Unscheduled:
    pod: str
    component: str  # scorer | trainer | ...
    group: str | None  # the scorer group (headrace.io/group)
    reason: str  # Unschedulable, SchedulerError, ...
    message: str

    def line(self) -> str:
        what = f"{self.component} pod {self.pod}" + (f" (group {self.group})" if self.group
                                                     else "")
        return f"[unscheduled] {what}: {self.reason}: {self.message}"


def unscheduled(api_client: Any, namespace: str) -> list[Unscheduled]:
    """Headrace's pods in ``namespace`` the scheduler could not place, with its reason."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        pods: list[Any] = client.CoreV1Api(api_client).list_namespaced_pod(
            namespace, label_selector=SELECTOR, _request_timeout=15).items or []
    except ApiException as exc:
        if not exc.status:
            raise RetriableError(f"Kubernetes API server unreachable: {exc.reason}") from None
        raise ConfigError(f"Kubernetes API refused listing pods in {namespace} "
                          f"({exc.status}): {exc.reason}") from None
    except Exception as exc:  # urllib3/socket: the server is not there
        raise RetriableError(f"Kubernetes API server unreachable: {exc}") from None
    out: list[Unscheduled] = []
    for p in pods:
        if p.spec.node_name or (p.status and p.status.phase not in (None, "Pending")):
            continue
        cond = next((c for c in (p.status.conditions or []) if c.type == "PodScheduled"
                     and c.status == "False"), None) if p.status else None
        if cond is None:
            continue  # not yet seen by the scheduler
        labels: dict[str, str] = p.metadata.labels or {}
        out.append(Unscheduled(str(p.metadata.name),
                               labels.get("app.kubernetes.io/component", "?"),
                               labels.get("headrace.io/group"),
                               str(cond.reason or "Unschedulable"),
                               " ".join(str(cond.message or "").split())))
    return sorted(out, key=lambda u: u.pod)
