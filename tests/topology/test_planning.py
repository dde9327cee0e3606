from __future__ import annotations

import random
from typing import Any

import pytest

from headrace.topology.cluster import ClusterSpec
from headrace.topology.placement import Plan, moved_partitions
from headrace.topology.planning import group_name, plan_placement
from tests.topology.conftest import gpu_node


def layout(plan: Plan) -> dict[str, list[tuple[int, ...]]]:
    return {g.name: [p.partitions for p in g.pods] for g in plan.groups}


def pods_per_node(plan: Plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in plan.groups:
        for pod in g.pods:
            assert pod.node is not None
            out[pod.node] = out.get(pod.node, 0) + g.gpus
    return out


def test_partitions_are_read_in_rack_when_capacity_allows(
    make_cluster: Any, three_racks: Any
) -> None:
    plan = plan_placement(cluster=make_cluster(**three_racks))
    # rackCycle r1,r2,r3 with RF 2: partition p has replicas in racks p%3 and (p+1)%3.
    assert layout(plan) == {
        "clicks-r1": [(0, 2, 5, 6), (9,)],
        "clicks-r2": [(1, 3, 4, 7)],
        "clicks-r3": [(8, 10, 11)],
    }
    assert plan.stats.in_rack == plan.stats.placed == 12
    assert plan.explanations == ()
    g = plan.groups[0]
    assert (g.client_rack, g.zone, g.gpus) == ("r1", "z1", 1)
    assert [(r.key, r.values) for r in g.affinity] == [("topology.headrace.io/rack", ("r1",))]
    assert [t.key for t in g.tolerations] == ["nvidia.com/gpu"]


def test_a_required_gpu_type_only_uses_nodes_of_that_type(
    make_cluster: Any, three_racks: Any
) -> None:
    three_racks["streams"][0]["gpuType"] = "a100"
    plan = plan_placement(cluster=make_cluster(**three_racks))
    assert {g.rack for g in plan.groups} == {"r1", "r2"}
    assert all(pod.node in ("a1", "a2") for g in plan.groups for pod in g.pods)
    terms = [(r.key, r.values) for r in plan.groups[0].affinity]
    assert ("nvidia.com/gpu.product", ("a100",)) in terms
    # Every partition has an a100 rack among its two replica racks (r1 or r2), and 4 A100
    # slots x 4 partitions is room enough: all 12 stay in-rack, nothing is explained.
    assert plan.stats.placed == 12 and plan.stats.in_rack == 12
    assert plan.explanations == ()


def test_volume_pinned_to_nodes_wins_over_rack_and_is_explained(make_cluster: Any,
                                                               three_racks: Any) -> None:
    three_racks["volumes"] = [{"name": "feat", "nodes": ["a1"], "claim": "feat-pvc"}]
    three_racks["streams"] = [{"name": "views", "partitions": 4, "volume": "feat",
                               "partitionRacks": [["r1", "r2"], ["r2", "r3"], ["r3"], ["r1"]]}]
    plan = plan_placement(cluster=make_cluster(**three_racks))
    assert layout(plan) == {"views-r1": [(0, 1, 2, 3)]}
    g = plan.groups[0]
    assert ("kubernetes.io/hostname", ("a1",)) in [(r.key, r.values) for r in g.affinity]
    assert g.volume_claim == "feat-pvc"
    [why] = plan.explanations
    assert (why.reason, why.partitions, why.group) == ("volume-elsewhere", (1, 2), "views-r1")
    assert "volume feat" in why.message and "partitions 1-2" in why.message
    assert plan.stats.in_rack == 2


def test_too_little_gpu_capacity_is_explained_and_never_oversubscribed(make_cluster: Any) -> None:
    cluster = make_cluster(
        nodes=[gpu_node("g1", "r1", "z1", 1, "t4"), gpu_node("g2", "r2", "z1", 2, "t4")],
        streams=[{"name": "s", "partitions": 20, "rackCycle": ["r1"], "replicationFactor": 1}],
    )
    plan = plan_placement(cluster=cluster)
    # r1 has one GPU -> one pod of 4 in-rack; r2 lends its two GPUs (rack-full, same zone).
    assert layout(plan) == {"s-r1": [(0, 1, 2, 3)], "s-r2": [(4, 5, 6, 7), (8, 9, 10, 11)]}
    assert plan.unplaced == {"s": tuple(range(12, 20))}
    assert [(e.reason, e.partitions) for e in plan.explanations] == [
        ("no-capacity", tuple(range(12, 20))),
        ("rack-full", tuple(range(4, 12))),
    ]
    assert "every eligible node is full" in plan.explanations[0].message
    assert pods_per_node(plan) == {"g1": 1, "g2": 2}


def test_no_node_with_the_gpu_type_anywhere_is_its_own_reason(make_cluster: Any,
                                                               three_racks: Any) -> None:
    three_racks["streams"][0]["gpuType"] = "h100"
    plan = plan_placement(cluster=make_cluster(**three_racks))
    assert plan.groups == () and plan.unplaced == {"clicks": tuple(range(12))}
    assert [e.reason for e in plan.explanations] == ["no-eligible-node"]


def _tight() -> dict[str, Any]:
    # Rack r1 is exactly full: 3 single-GPU nodes, 12 partitions at 4 per pod.
    return {
        "nodes": [gpu_node(f"n{i}", "r1", "z1", 1, "t4") for i in range(1, 4)]
        + [gpu_node("m1", "r2", "z1", 4, "t4")],
        "streams": [{"name": "s", "partitions": 12, "rackCycle": ["r1"], "replicationFactor": 1}],
    }


def test_removing_a_node_moves_only_its_partitions(make_cluster: Any) -> None:
    before = plan_placement(cluster=make_cluster(**_tight()))
    assert layout(before) == {"s-r1": [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)]}
    after = plan_placement(cluster=before_cluster(make_cluster).without_node("n2"),
                           previous=before)
    # One pod's worth of partitions leaves the rack (highest ordinal); the rest stay put.
    assert layout(after) == {"s-r1": [(0, 1, 2, 3), (4, 5, 6, 7)], "s-r2": [(8, 9, 10, 11)]}
    assert moved_partitions(before, after) == 4
    assert [(e.reason, e.partitions) for e in after.explanations] == [
        ("rack-full", (8, 9, 10, 11))]


def before_cluster(make_cluster: Any) -> ClusterSpec:
    cluster: ClusterSpec = make_cluster(**_tight())
    return cluster


def test_adding_a_node_moves_nothing_and_the_plan_is_idempotent(make_cluster: Any,
                                                                three_racks: Any) -> None:
    first = plan_placement(cluster=make_cluster(**three_racks))
    again = plan_placement(cluster=make_cluster(**three_racks), previous=first)
    assert again == first
    three_racks["nodes"].append(gpu_node("a4", "r1", "z1", 8, "a100"))
    grown = plan_placement(cluster=make_cluster(**three_racks), previous=first)
    assert moved_partitions(first, grown) == 0


def test_growing_a_topic_keeps_old_ownership(make_cluster: Any, three_racks: Any) -> None:
    first = plan_placement(cluster=make_cluster(**three_racks))
    three_racks["streams"][0]["partitions"] = 15
    grown = plan_placement(cluster=make_cluster(**three_racks), previous=first)
    assert moved_partitions(first, grown) == 0
    assert grown.stats.placed == 15


def test_the_plan_does_not_depend_on_input_order(make_cluster: Any, three_racks: Any) -> None:
    three_racks["streams"].append({"name": "views", "partitions": 7, "rackCycle": ["r3", "r2"]})
    plan = plan_placement(cluster=make_cluster(**three_racks))
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(three_racks["nodes"])
        rng.shuffle(three_racks["streams"])
        assert plan_placement(cluster=make_cluster(**three_racks)) == plan


def test_a_training_gang_reservation_keeps_gpus_out_of_scorer_hands(make_cluster: Any,
                                                                    three_racks: Any) -> None:
    three_racks["trainer"] = {"workers": 2, "gpusPerWorker": 2, "gpuType": "a100"}
    plan = plan_placement(cluster=make_cluster(**three_racks))
    assert plan.trainer is not None and plan.trainer.nodes == ("a1", "a2")
    # Every A100 is reserved, so scorers only get the T4 in r3 (one pod of 4 partitions).
    assert pods_per_node(plan) == {"t3": 1}
    assert plan.stats.placed == 4
    three_racks["trainer"]["workers"] = 3
    short = plan_placement(cluster=make_cluster(**three_racks))
    assert short.trainer is not None and not short.trainer.satisfied
    assert "trainer-reservation" in [e.reason for e in short.explanations]


def test_cpu_scorers_keep_off_gpu_nodes_while_cpu_nodes_have_room(make_cluster: Any,
                                                                   three_racks: Any) -> None:
    cluster = make_cluster(scorer={"gpus": 0, "cpuMillis": 4000, "memoryMiB": 8192,
                                   "maxPartitionsPerPod": 4}, **three_racks)
    plan = plan_placement(cluster=cluster)
    assert {pod.node for g in plan.groups for pod in g.pods} == {"c1", "c2", "c3"}
    assert all(g.gpus == 0 and g.tolerations == () for g in plan.groups)


def test_cordoned_and_tainted_nodes_are_not_used(make_cluster: Any) -> None:
    cluster = make_cluster(
        nodes=[gpu_node("g1", "r1", "z1", 4, "t4", schedulable=False),
               {**gpu_node("g2", "r1", "z1", 4, "t4"),
                "taints": [{"key": "dedicated", "value": "training"}]},
               gpu_node("g3", "r2", "z1", 4, "t4")],
        streams=[{"name": "s", "partitions": 2, "rackCycle": ["r1"], "replicationFactor": 1}],
    )
    plan = plan_placement(cluster=cluster)
    assert layout(plan) == {"s-r2": [(0, 1)]}
    assert [e.reason for e in plan.explanations] == ["unschedulable"]


def test_plan_round_trips_through_json(make_cluster: Any, three_racks: Any) -> None:
    plan = plan_placement(cluster=make_cluster(**three_racks))
    assert Plan.model_validate_json(plan.to_json()) == plan


@pytest.mark.parametrize(("stream", "rack"), [("clicks", "r1"), ("a_b", "Rack.7"),
                                              ("x" * 40, "rack-with-a-long-name")])
def test_group_names_are_dns_labels(stream: str, rack: str) -> None:
    name = group_name(stream, rack)
    assert len(name) <= 30 and name.replace("-", "").isalnum() and name.islower()
    assert name == group_name(stream, rack)
