from __future__ import annotations

from typing import Any

import pytest

from headrace.topology.cluster import ClusterSpec, parse_cluster


def gpu_node(
    name: str, rack: str, zone: str, gpus: int, gpu_type: str, **kw: Any
) -> dict[str, Any]:
    return {"name": name, "rack": rack, "zone": zone, "cpuMillis": 32000, "memoryMiB": 131072,
            "gpus": gpus, "gpuType": gpu_type,
            "taints": [{"key": "nvidia.com/gpu", "value": "present"}], **kw}


def cpu_node(name: str, rack: str, zone: str) -> dict[str, Any]:
    return {"name": name, "rack": rack, "zone": zone, "cpuMillis": 16000, "memoryMiB": 65536}


@pytest.fixture
def make_cluster() -> Any:
    def make(**data: Any) -> ClusterSpec:
        data.setdefault("scorer", {"gpus": 1, "maxPartitionsPerPod": 4})
        return parse_cluster(data)

    return make


@pytest.fixture
def three_racks() -> dict[str, Any]:
    """Two zones, three racks, mixed A100/T4 GPU nodes and one CPU node per rack."""
    return {
        "nodes": [
            gpu_node("a1", "r1", "z1", 2, "a100"), cpu_node("c1", "r1", "z1"),
            gpu_node("a2", "r2", "z1", 2, "a100"), cpu_node("c2", "r2", "z1"),
            gpu_node("t3", "r3", "z2", 1, "t4"), cpu_node("c3", "r3", "z2"),
        ],
        "streams": [{"name": "clicks", "partitions": 12, "rackCycle": ["r1", "r2", "r3"],
                     "replicationFactor": 2}],
    }
