"""Helm values for ``helm/headrace`` from a plan: one ``scorerGroups`` entry per locality group.

The chart is the one source of the scorer objects: ``topology plan --values-out`` writes these
values for ``helm install``, and ``topology apply`` renders the chart with the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from headrace.topology.cluster import Deploy, TrainerNeeds
from headrace.topology.placement import Plan, ScorerGroup


@dataclass(frozen=True, kw_only=True)
class ScorerOptions:
    """How the planned groups are run; each maps onto chart values.

    ``static``: a StatefulSet per group, pod ``i`` reads the plan's partitions for ordinal
    ``i`` (``podPartitions``). ``consumer-group``: a Deployment whose pods join the stream's
    consumer group (no ``podPartitions``), optionally scaled by KEDA up to the group's
    partition count.
    """

    mode: Literal["static", "consumer-group"] = "static"
    keda: bool = False
    keda_lag_threshold: int = 1000
    keda_min_replicas: int = 1
    service_monitor: bool = False


def group_values(g: ScorerGroup, *, static: bool = True) -> dict[str, Any]:
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
    if not static:  # the chart makes a group without podPartitions a consumer-group Deployment
        del entry["podPartitions"]
    if g.volume_claim:
        entry["volumeClaim"] = g.volume_claim
        if g.volume:
            entry["volume"] = g.volume
    tol = [t.model_dump(exclude_defaults=False) for t in g.tolerations if t.key != "nvidia.com/gpu"]
    if tol:
        entry["tolerations"] = [{k: v for k, v in t.items() if v != ""} for t in tol]
    return entry


def image_values(image: str) -> dict[str, str]:
    """``repo[:tag]`` or ``repo@sha256:...`` as the chart's ``image`` block."""
    repo, at, digest = image.partition("@")
    if at:
        return {"repository": repo, "digest": digest}
    name, colon, tag = repo.rpartition(":")
    if colon and "/" not in tag:  # a colon after the last slash is a tag, not a port
        return {"repository": name, "tag": tag}
    return {"repository": repo, "tag": "latest"}


def deploy_values(deploy: Deploy) -> dict[str, Any]:
    """The cluster file's ``deploy:`` settings that differ from their defaults. The defaults
    are the chart's own: its image, and for release ``headrace`` the claim ``headrace-dfs`` and
    Secret ``headrace-kafka`` it creates, so `helm install` still creates them."""
    default = Deploy()
    out: dict[str, Any] = {}
    if deploy.image != default.image:
        out["image"] = image_values(deploy.image)
    if deploy.gpu_image != default.gpu_image:
        out["gpuImage"] = image_values(deploy.gpu_image)
    if deploy.kafka_secret != default.kafka_secret:
        out["kafka"] = {"existingSecret": deploy.kafka_secret}
    if deploy.dfs_claim != default.dfs_claim:
        out["dfs"] = {"existingClaim": deploy.dfs_claim}
    return out


def chart_values(*, plan: Plan, deploy: Deploy, trainer: TrainerNeeds | None = None,
                 options: ScorerOptions | None = None) -> dict[str, Any]:
    """Values to pass with ``-f``; they override only what the plan and the cluster file decide."""
    opts = options or ScorerOptions()
    values = deploy_values(deploy)
    values["dfs"] = {**values.get("dfs", {}), "root": deploy.dfs_root}
    values["scorer"] = {
        "graceSeconds": deploy.grace_s,
        "httpPort": deploy.http_port,
        "batchSize": deploy.batch_size,
        "maxWaitMs": deploy.max_wait_ms,
        "decodeProcesses": deploy.decode_processes,
    }
    static = opts.mode == "static"
    values["scorerGroups"] = [group_values(g, static=static) for g in plan.groups]
    if opts.keda:
        values["keda"] = {"enabled": True, "lagThreshold": opts.keda_lag_threshold,
                          "minReplicaCount": opts.keda_min_replicas}
    if opts.service_monitor:
        values["serviceMonitor"] = {"enabled": True}
    if trainer is not None and trainer.gang != "none":
        values["trainer"] = {"gang": trainer.gang}
    return values
