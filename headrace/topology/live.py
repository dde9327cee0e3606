"""Build a cluster description from live data: Kubernetes nodes and volumes, Kafka metadata.

``cluster_from_live`` is pure (it takes already-fetched objects) so it is tested without a
cluster; ``fetch_live`` does the fetching with a ``CoreV1Api`` and a Kafka metadata callable
(``headrace.streams`` owns the Kafka client, so it is passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.utils import parse_quantity

from headrace.topology.cluster import (
    ClusterSpec,
    Deploy,
    Labels,
    ScorerNeeds,
    TrainerNeeds,
    parse_cluster,
)

KafkaMetadata = tuple[Mapping[str, Sequence[Sequence[int]]], Mapping[int, str]]


def _node(n: Any, labels: Labels) -> dict[str, Any] | None:
    lab = n.metadata.labels or {}
    rack = lab.get(labels.rack) or lab.get(labels.zone)
    if not rack:
        return None  # a node without a rack label cannot be planned for; it is skipped
    alloc = (n.status.allocatable if n.status else None) or {}
    taints = [{"key": t.key, "value": t.value or "", "effect": t.effect}
              for t in (n.spec.taints or [])] if n.spec else []
    gpus = int(parse_quantity(alloc.get("nvidia.com/gpu", "0")))
    return {
        "name": n.metadata.name, "rack": rack, "zone": lab.get(labels.zone, "default"),
        "cpuMillis": int(parse_quantity(alloc.get("cpu", "0")) * 1000),
        "memoryMiB": int(parse_quantity(alloc.get("memory", "0")) / (1024 * 1024)),
        "gpus": gpus, "gpuType": lab.get(labels.gpu_type) if gpus else None,
        "schedulable": not (n.spec and n.spec.unschedulable), "taints": taints,
    }


def _volume(pv: Any, labels: Labels) -> dict[str, Any] | None:
    aff = pv.spec.node_affinity.required if pv.spec and pv.spec.node_affinity else None
    nodes: set[str] = set()
    zones: set[str] = set()
    for term in (aff.node_selector_terms if aff else None) or []:
        for req in term.match_expressions or []:
            if req.operator != "In":
                continue
            if req.key == labels.hostname:
                nodes.update(req.values or [])
            elif req.key == labels.zone:
                zones.update(req.values or [])
    if not nodes and not zones:
        return None  # reachable from everywhere (e.g. the RWX DFS): no placement constraint
    claim = pv.spec.claim_ref.name if pv.spec.claim_ref else None
    out: dict[str, Any] = {"name": pv.metadata.name, "claim": claim}
    out["nodes" if nodes else "zones"] = sorted(nodes or zones)
    return out


def cluster_from_live(
    *,
    nodes: Sequence[Any],
    volumes: Sequence[Any] = (),
    topics: Mapping[str, Sequence[Sequence[int]]],
    broker_racks: Mapping[int, str],
    stream_volumes: Mapping[str, str] | None = None,
    labels: Labels | None = None,
    scorer: ScorerNeeds | None = None,
    trainer: TrainerNeeds | None = None,
    deploy: Deploy | None = None,
) -> ClusterSpec:
    """``topics``: topic -> per-partition replica broker ids; only ``data.<stream>`` count."""
    lab = labels or Labels()
    node_rows = [r for r in (_node(n, lab) for n in nodes) if r is not None]
    names = {r["name"] for r in node_rows}
    vol_rows = []
    for pv in volumes:
        row = _volume(pv, lab)
        if row is not None and "nodes" in row:
            row["nodes"] = [x for x in row["nodes"] if x in names]
            if not row["nodes"]:
                continue
        if row is not None:
            vol_rows.append(row)
    vol_names = {v["name"] for v in vol_rows}
    streams = []
    for topic in sorted(topics):
        parts = topic.split(".")
        if len(parts) != 2 or parts[0] != "data":
            continue
        racks = [sorted({broker_racks[b] for b in reps if b in broker_racks})
                 for reps in topics[topic]]
        srow: dict[str, Any] = {
            "name": parts[1], "partitions": len(racks), "partitionRacks": racks,
        }
        vol = (stream_volumes or {}).get(parts[1])
        if vol in vol_names:
            srow["volume"] = vol
        streams.append(srow)
    data: dict[str, Any] = {
        "nodes": node_rows, "volumes": vol_rows, "streams": streams,
        "labels": lab.model_dump(by_alias=True),
    }
    for key, model in (("scorer", scorer), ("trainer", trainer), ("deploy", deploy)):
        if model is not None:
            data[key] = model.model_dump(by_alias=True, exclude_none=True)
    return parse_cluster(data, source="live cluster")


def fetch_live(
    *, core_api: Any, kafka_metadata: Callable[[], KafkaMetadata], **kw: Any
) -> ClusterSpec:
    nodes = core_api.list_node().items
    volumes = core_api.list_persistent_volume().items
    topics, broker_racks = kafka_metadata()
    return cluster_from_live(nodes=nodes, volumes=volumes, topics=topics,
                             broker_racks=broker_racks, **kw)
