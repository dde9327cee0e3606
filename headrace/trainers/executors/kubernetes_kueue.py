"""Why Kueue has not admitted a job yet: its Workload's conditions, read as the executor's
account (the chart's Role grants Workloads read under ``trainer.gang: kueue``).

Kueue keeps a suspended Job's pods from existing until the whole Job fits the queue's quota, so
no pod carries a scheduler's reason; the Workload Kueue made for the Job (owned by it) does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KUEUE_GROUP = "kueue.x-k8s.io"
# v1beta2 since Kueue 0.15; v1beta1 before (and still served through conversion).
KUEUE_VERSIONS = ("v1beta2", "v1beta1")


def workloads_of(list_call: Callable[[str], Any], owner: str) -> list[dict[str, Any]]:
    """The Workloads owned by the object named ``owner``; ``list_call(version)`` lists the
    namespace's Workloads and returns None where that version is not served."""
    for version in KUEUE_VERSIONS:
        got = list_call(version)
        if got is not None:
            return [w for w in got.get("items") or []
                    if any(r.get("name") == owner
                           for r in w.get("metadata", {}).get("ownerReferences") or [])]
    return []


def admission_wait(workload: dict[str, Any]) -> str | None:
    """Kueue's reason for holding the Workload back, or None once it is admitted (or before
    Kueue has said anything)."""
    conds = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    if (conds.get("Admitted") or {}).get("status") == "True":
        return None
    for kind in ("Evicted", "QuotaReserved", "Admitted"):
        c = conds.get(kind)
        if c is None:
            continue
        holding = c.get("status") == ("True" if kind == "Evicted" else "False")
        if holding and (c.get("message") or c.get("reason")):
            return f"Kueue: {c.get('message') or c.get('reason')}"
    return None
