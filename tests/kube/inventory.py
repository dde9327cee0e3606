"""The simulated cluster the Kubernetes tests run on, described once: the topology planner's
cluster file and the kwok Nodes (same names, racks, zones, GPUs, taints) built from it, plus the
data volumes as local PersistentVolumes on the nodes the cluster file says reach them."""

from __future__ import annotations

import copy
from typing import Any

# The nodes themselves: ./dev kube runs the same ones.
from tools.kwok_nodes import GPU, GPU_PRODUCT, GPU_TAINT, NODES, RACK, ZONE, node_manifest

__all__ = ["GPU", "GPU_PRODUCT", "GPU_TAINT", "NODES", "RACK", "VOLUMES", "ZONE", "cluster_file",
           "node_manifest", "volume_objects"]

# `features` is a disk in gpu-a1: only that node reaches it.
VOLUMES: list[dict[str, Any]] = [{"name": "features", "nodes": ["gpu-a1"]}]


def cluster_file(*, streams: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """A cluster description of these nodes (``streams`` default: clicks over three racks and
    views read from the ``features`` volume)."""
    data: dict[str, Any] = {
        "nodes": copy.deepcopy(NODES), "volumes": copy.deepcopy(VOLUMES),
        "streams": streams if streams is not None else [
            {"name": "clicks", "partitions": 6, "rackCycle": ["r1", "r2", "r3"],
             "replicationFactor": 2},
            {"name": "views", "partitions": 2, "partitionRacks": [["r1"], ["r1"]],
             "volume": "features", "gpuType": "a100", "maxPartitionsPerPod": 4}],
        "scorer": {"gpus": 1, "cpuMillis": 1000, "memoryMiB": 1024, "maxPartitionsPerPod": 4},
        "trainer": {"workers": 1, "gpusPerWorker": 1, "gpuType": "a100"},
        "deploy": {"image": "registry.example/headrace:0.1.0",
                   "gpuImage": "registry.example/headrace:0.1.0-gpu"},
    }
    data.update(extra)
    return data


def volume_objects(namespace: str, *, dfs_claim: str = "headrace-dfs") -> list[dict[str, Any]]:
    """PersistentVolumes (cluster-wide, named after the namespace) pre-bound to the claims the
    scorer pods mount: the shared DFS (every node) and each data volume (a local disk on its
    nodes, so the scheduler must place its readers there)."""
    out: list[dict[str, Any]] = []

    def pair(claim: str, modes: list[str], source: dict[str, Any],
             affinity: dict[str, Any] | None) -> None:
        pv_name = f"{namespace}-{claim}"
        spec: dict[str, Any] = {"capacity": {"storage": "10Gi"}, "accessModes": modes,
                                "persistentVolumeReclaimPolicy": "Retain",
                                "storageClassName": "", **source,
                                "claimRef": {"namespace": namespace, "name": claim}}
        if affinity:
            spec["nodeAffinity"] = affinity
        out.append({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": pv_name}, "spec": spec})
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim, "namespace": namespace},
                    "spec": {"accessModes": modes, "storageClassName": "", "volumeName": pv_name,
                             "resources": {"requests": {"storage": "10Gi"}}}})

    pair(dfs_claim, ["ReadWriteMany"], {"nfs": {"server": "10.0.0.1", "path": "/dfs"}}, None)
    for v in VOLUMES:
        pair(v.get("claim", v["name"]), ["ReadWriteOnce"], {"local": {"path": f"/mnt/{v['name']}"}},
             {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "kubernetes.io/hostname", "operator": "In", "values": v["nodes"]}]}]}})
    return out
