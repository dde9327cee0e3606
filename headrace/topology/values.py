"""Helm values for ``helm/headrace`` from a plan: one ``scorerGroups`` entry per locality group."""

from __future__ import annotations

from typing import Any

from headrace.topology.cluster import Deploy
from headrace.topology.placement import Plan, ScorerGroup


def group_values(g: ScorerGroup) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": g.name,
        "stream": g.stream,
        "partitions": list(g.partitions),
        "podPartitions": [list(p.partitions) for p in g.pods],
        "replicas": len(g.pods),
        "clientRack": g.client_rack,
        "gpu": g.gpus,
        "resources": {
            "requests": {"cpu": f"{g.cpu_m}m", "memory": f"{g.memory_mib}Mi"},
            "limits": {"memory": f"{g.memory_mib}Mi"},
        },
        # The GPU type requirement is already one of these terms (label key from the cluster).
        "nodeAffinity": [
            {"key": r.key, "operator": r.operator, "values": list(r.values)} for r in g.affinity
        ],
    }
    if g.volume_claim:
        entry["volumeClaim"] = g.volume_claim
    tol = [t.model_dump(exclude_defaults=False) for t in g.tolerations if t.key != "nvidia.com/gpu"]
    if tol:
        entry["tolerations"] = [{k: v for k, v in t.items() if v != ""} for t in tol]
    return entry


def chart_values(*, plan: Plan, deploy: Deploy) -> dict[str, Any]:
    """Values to pass with ``-f``; they override only what the plan decides."""
    return {
        "dfs": {"root": deploy.dfs_root},
        "scorer": {
            "graceSeconds": deploy.grace_s,
            "httpPort": deploy.http_port,
            "batchSize": deploy.batch_size,
            "maxWaitMs": deploy.max_wait_ms,
            "decodeProcesses": deploy.decode_processes,
        },
        "scorerGroups": [group_values(g) for g in plan.groups],
    }
