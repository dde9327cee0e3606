"""The simulated nodes kwok runs beside a :class:`~tools.kube_cluster.KubeCluster`: A100 and T4
GPU nodes (``nvidia.com/gpu`` capacity and taint, the GPU product label) and CPU-only nodes over
three racks and two zones, registered as a kubelet would register them. The tests' cluster
(tests/kube/inventory.py) and ``./dev kube`` use the same ones, so a ``topology apply`` on a
trial cluster schedules as it does in the tests."""

from __future__ import annotations

from typing import Any

RACK = "topology.headrace.io/rack"
ZONE = "topology.kubernetes.io/zone"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present"}
KWOK_LABEL = "type=kwok"  # kwok manages the nodes with this label, and no others


def _gpu(name: str, rack: str, zone: str, gpus: int, gpu_type: str) -> dict[str, Any]:
    return {"name": name, "rack": rack, "zone": zone, "cpuMillis": 32000, "memoryMiB": 131072,
            "gpus": gpus, "gpuType": gpu_type, "taints": [GPU_TAINT]}


def _cpu(name: str, rack: str, zone: str) -> dict[str, Any]:
    return {"name": name, "rack": rack, "zone": zone, "cpuMillis": 16000, "memoryMiB": 65536}


NODES: list[dict[str, Any]] = [
    _gpu("gpu-a1", "r1", "z1", 4, "a100"), _cpu("cpu-c1", "r1", "z1"),
    _gpu("gpu-a2", "r2", "z1", 4, "a100"), _cpu("cpu-c2", "r2", "z1"),
    _gpu("gpu-t3", "r3", "z2", 2, "t4"), _cpu("cpu-c3", "r3", "z2"),
]


def node_manifest(n: dict[str, Any]) -> dict[str, Any]:
    """A kwok-managed Node as a kubelet would register it (labels, taints, capacity)."""
    labels = {"type": "kwok", "kubernetes.io/hostname": n["name"], "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", RACK: n["rack"], ZONE: n["zone"]}
    capacity = {"cpu": f"{n['cpuMillis']}m", "memory": f"{n['memoryMiB']}Mi", "pods": "110"}
    if n.get("gpus"):
        labels[GPU_PRODUCT] = n["gpuType"]
        capacity[GPU] = str(n["gpus"])
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n["name"], "labels": labels,
                         "annotations": {"kwok.x-k8s.io/node": "fake",
                                         "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": [{**t, "effect": t.get("effect", "NoSchedule")}
                                for t in n.get("taints", [])]},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "nodeInfo": {"kubeletVersion": "fake", "architecture": "amd64",
                                    "operatingSystem": "linux"}}}


def ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))
