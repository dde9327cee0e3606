"""Placement planner benchmark, by simulation (no cluster needed).

Builds a synthetic cluster (5 000 nodes in 50 racks / 5 zones, mixed GPU types, 500 volumes
zonal or pinned to nodes, 500 streams x 100 partitions with rack-aware replicas), then reports,
side by side in one run:

* time to plan (target < 10 s);
* share of partitions read in-rack: the planner vs a default spread (pods spread evenly over
  the racks a stream may use, partitions assigned round-robin to pods, replica racks ignored);
* partitions moved when one node of 5 000 leaves (the busiest, and the busiest holding a
  local volume; target < 1 %), and re-plan time, vs a plan made without the previous one.

    .venv/bin/python bench/bench_topology.py [--small] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headrace.topology.cluster import ClusterSpec, parse_cluster
from headrace.topology.placement import Plan, moved_partitions
from headrace.topology.planning import plan_placement


def synthetic_cluster(
    *, racks: int, nodes_per_rack: int, zones: int, streams: int, partitions: int, seed: int
) -> ClusterSpec:
    rng = random.Random(seed)
    rack_names = [f"r{i:03d}" for i in range(racks)]
    zone_of = {r: f"z{i % zones}" for i, r in enumerate(rack_names)}
    nodes: list[dict[str, Any]] = []
    gpu_nodes_by_rack: dict[str, list[str]] = {r: [] for r in rack_names}
    a100_by_rack: dict[str, list[str]] = {r: [] for r in rack_names}
    for r in rack_names:
        for j in range(nodes_per_rack):
            name = f"{r}-n{j:03d}"
            node: dict[str, Any] = {
                "name": name, "rack": r, "zone": zone_of[r],
                "cpuMillis": 64000, "memoryMiB": 262144,
            }
            kind = j % 10
            if kind < 3:  # 30 % 8 x A100
                node.update(gpus=8, gpuType="a100")
            elif kind < 6:  # 30 % 4 x T4
                node.update(gpus=4, gpuType="t4")
            if "gpus" in node:
                node["taints"] = [{"key": "nvidia.com/gpu", "value": "present"}]
                gpu_nodes_by_rack[r].append(name)
                if node["gpuType"] == "a100":
                    a100_by_rack[r].append(name)
            nodes.append(node)
    volumes: list[dict[str, Any]] = []
    stream_list: list[dict[str, Any]] = []
    for i in range(streams):
        home = rack_names[rng.randrange(racks)]
        needs_a100 = i % 7 == 3
        if i % 5 == 0:  # node-pinned local volume: 6 GPU nodes (of its GPU type) of one rack
            pool = a100_by_rack[home] if needs_a100 else gpu_nodes_by_rack[home]
            pinned = sorted(rng.sample(pool, 6))
            volumes.append({"name": f"vol-{i:04d}", "nodes": pinned})
            leaders = [home]
        else:  # zonal volume: replicas' leader rack in that zone
            volumes.append({"name": f"vol-{i:04d}", "zones": [zone_of[home]]})
            leaders = [r for r in rack_names if zone_of[r] == zone_of[home]]
        prs = []
        for _p in range(partitions):
            lead = leaders[rng.randrange(len(leaders))]
            others = rng.sample([r for r in rack_names if r != lead], 2)
            prs.append([lead, *others])
        stream: dict[str, Any] = {
            "name": f"s{i:04d}", "partitions": partitions, "partitionRacks": prs,
            "volume": f"vol-{i:04d}",
        }
        if needs_a100:
            stream["gpuType"] = "a100"
        stream_list.append(stream)
    return parse_cluster({
        "nodes": nodes, "volumes": volumes, "streams": stream_list,
        "scorer": {"gpus": 1, "cpuMillis": 4000, "memoryMiB": 16384, "maxPartitionsPerPod": 8},
        "trainer": {"workers": 4, "gpusPerWorker": 8, "gpuType": "a100"},
    })


def default_spread_in_rack(cluster: ClusterSpec, plan: Plan) -> float:
    """In-rack share when pods spread evenly over the racks a stream may use, ignoring replicas."""
    pods_of: dict[str, int] = {}
    for g in plan.groups:
        pods_of[g.stream] = pods_of.get(g.stream, 0) + len(g.pods)
    nodes_by_name = {n.name: n for n in cluster.nodes}
    vols = {v.name: v for v in cluster.volumes}
    all_racks = sorted({n.rack for n in cluster.nodes})
    hits = total = 0
    for s in cluster.streams:
        vol = vols.get(s.volume) if s.volume else None
        if vol is not None and vol.nodes:
            usable = sorted({nodes_by_name[n].rack for n in vol.nodes})
        elif vol is not None:
            usable = sorted({n.rack for n in cluster.nodes if n.zone in vol.zones})
        else:
            usable = all_racks
        npods = max(1, pods_of.get(s.name, 1))
        pod_rack = [usable[i % len(usable)] for i in range(npods)]
        for p, reps in enumerate(s.replica_racks()):
            total += 1
            hits += pod_rack[p % npods] in reps
    return hits / total if total else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="500 nodes, 50 streams (quick run)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    if args.small:
        shape = {"racks": 10, "nodes_per_rack": 50, "zones": 5, "streams": 50, "partitions": 100}
    else:
        shape = {"racks": 50, "nodes_per_rack": 100, "zones": 5, "streams": 500, "partitions": 100}
    t0 = time.perf_counter()
    cluster = synthetic_cluster(seed=args.seed, **shape)
    t_build = time.perf_counter() - t0
    n_nodes, n_parts = len(cluster.nodes), sum(s.partitions for s in cluster.streams)
    print(f"cluster: {n_nodes} nodes, {len(cluster.volumes)} volumes, "
          f"{len(cluster.streams)} streams, {n_parts} partitions (built in {t_build:.2f} s)")

    t0 = time.perf_counter()
    plan = plan_placement(cluster=cluster)
    t_plan = time.perf_counter() - t0
    again = plan_placement(cluster=cluster)
    st = plan.stats
    print(f"plan:    {t_plan:.2f} s (target < 10 s); {st.pods} pods, {st.gpus} GPUs, "
          f"{st.placed}/{st.partitions} partitions placed, deterministic={again == plan}")

    base = default_spread_in_rack(cluster, plan)
    print(f"in-rack: planner {st.in_rack_share:.1%} vs default spread {base:.1%} "
          f"(ratio {st.in_rack_share / base if base else float('inf'):.1f}x; target >= 95%)")

    busiest: dict[str, int] = {}
    for g in plan.groups:
        for pod in g.pods:
            if pod.node:
                busiest[pod.node] = busiest.get(pod.node, 0) + 1
    pinned = {n for v in cluster.volumes for n in v.nodes}
    scenarios = [
        ("busiest node", min(busiest, key=lambda n: (-busiest[n], n))),
        # A node holding a local volume: its pods can only go to the volume's other nodes.
        ("busiest volume-pinned node",
         min((n for n in busiest if n in pinned), key=lambda n: (-busiest[n], n))),
    ]
    for label, victim in scenarios:
        smaller = cluster.without_node(victim)
        t0 = time.perf_counter()
        replan = plan_placement(cluster=smaller, previous=plan)
        t_replan = time.perf_counter() - t0
        moved = moved_partitions(plan, replan)
        fresh = moved_partitions(plan, plan_placement(cluster=smaller))
        print(f"churn:   removing the {label} {victim} ({busiest[victim]} scorer pods): "
              f"{moved} of {st.placed} partitions moved = {moved / st.placed:.3%} "
              f"(target < 1%); re-plan {t_replan:.2f} s; in-rack after "
              f"{replan.stats.in_rack_share:.1%}; a fresh plan without --previous moves {fresh}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
