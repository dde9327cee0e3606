"""``topology apply`` is an ApplySet (KEP-3659): a stream removed from the cluster file has its
objects deleted on the next apply, and ``--dry-run`` lists those deletes first. Run through the
real kubernetes client over the recording fake API server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.core.errors import ConfigError
from headrace.topology import commands
from headrace.topology.applyset import ApplySet, applyset_id
from headrace.topology.validation import validate_object
from headrace.topology.values import ScorerOptions
from tests.topology.fake_api import FakeApiServer, fake_client

PARENT = "/api/v1/namespaces/ml/configmaps/headrace-topology"
STS = "/apis/apps/v1/namespaces/ml/statefulsets"


@pytest.fixture
def two_streams(tmp_path: Path, three_racks: dict[str, Any]) -> Path:
    three_racks["streams"].append({"name": "views", "partitions": 4, "rackCycle": ["r1"],
                                   "replicationFactor": 1})
    three_racks["scorer"] = {"gpus": 1, "maxPartitionsPerPod": 4}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(three_racks))
    return path


def drop_stream(path: Path, stream: str) -> None:
    data = yaml.safe_load(path.read_text())
    data["streams"] = [s for s in data["streams"] if s["name"] != stream]
    path.write_text(yaml.safe_dump(data))


def names(server: FakeApiServer, collection: str) -> set[str]:
    return {p.rsplit("/", 1)[1] for p in server.objects if p.rsplit("/", 1)[0] == collection}


def test_removing_a_stream_then_apply_deletes_its_objects(two_streams: Path) -> None:
    server = FakeApiServer()
    api = fake_client(server)
    _, first = commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api)
    assert names(server, STS) == {"headrace-clicks-r1", "headrace-clicks-r2",
                                  "headrace-clicks-r3", "headrace-views-r2"}
    assert all(line.startswith("created ") for line in first)

    drop_stream(two_streams, "views")
    _, dry = commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api,
                                dry_run=True)
    views = ["PodDisruptionBudget/headrace-views-r2", "StatefulSet/headrace-views-r2",
             "Service/headrace-views-r2"]  # the reverse of creation order
    assert [line for line in dry if line.startswith("delete ")] == [f"delete {v}" for v in views]
    # The others, applied server-side as a dry run, would not change.
    assert {line.split()[0] for line in dry} == {"unchanged", "delete"}
    assert names(server, STS) >= {"headrace-views-r2"}  # a dry run changes nothing

    before = len(server.requests)
    _, second = commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api)
    assert [line for line in second if line.startswith("deleted ")] == [
        f"deleted {v}" for v in views]
    assert names(server, STS) == {"headrace-clicks-r1", "headrace-clicks-r2",
                                  "headrace-clicks-r3"}
    assert not any("views" in p for p in server.objects)
    deletes = [p for m, p, _ in server.requests[before:] if m == "DELETE"]
    assert len(deletes) == 3
    # The ServiceAccount and RBAC are still wanted: kept.
    assert "/api/v1/namespaces/ml/serviceaccounts/headrace-scorer" in server.objects


def test_a_dry_run_reads_only(two_streams: Path) -> None:
    server = FakeApiServer()
    api = fake_client(server)
    commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api)
    snapshot = dict(server.objects)
    drop_stream(two_streams, "views")
    before = len(server.requests)
    _, dry = commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api,
                                dry_run=True)
    # Reads, and server-side applies as dry runs (the server writes nothing).
    sent = list(zip(server.requests[before:], server.queries[before:], strict=True))
    assert {m for (m, _, _), _ in sent} == {"GET", "PATCH"}
    assert all(q.get("dryRun") == "All" for (m, _, _), q in sent if m != "GET")
    assert server.objects == snapshot and "delete StatefulSet/headrace-views-r2" in dry
    # With nothing applied yet, a dry run lists creates only.
    _, fresh = commands.run_apply(cluster_path=two_streams, namespace="ml",
                                  api_client=fake_client(FakeApiServer()), dry_run=True)
    assert fresh and all(line.startswith("create ") for line in fresh)


def test_members_and_parent_carry_the_applyset_labels(two_streams: Path) -> None:
    server = FakeApiServer()
    commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=fake_client(server))
    aset_id = applyset_id(name="headrace-topology", namespace="ml")
    assert re.fullmatch(r"applyset-[A-Za-z0-9_-]{43}-v1", aset_id)
    validate_object(server.objects[PARENT])  # the parent is a valid ConfigMap (strict)
    parent = server.objects[PARENT]["metadata"]
    assert parent["labels"]["applyset.kubernetes.io/id"] == aset_id
    assert parent["annotations"]["applyset.kubernetes.io/tooling"] == "headrace/v0.1.0"
    assert parent["annotations"]["applyset.kubernetes.io/contains-group-kinds"] == (
        "PodDisruptionBudget.policy,Role.rbac.authorization.k8s.io,"
        "RoleBinding.rbac.authorization.k8s.io,Service,ServiceAccount,StatefulSet.apps")
    for path, obj in server.objects.items():
        if path != PARENT:
            labels = obj["metadata"]["labels"]
            assert labels["applyset.kubernetes.io/part-of"] == aset_id, path
            assert labels["app.kubernetes.io/managed-by"] == "headrace", path
            validate_object(obj)


def test_a_kind_no_longer_rendered_is_still_pruned(two_streams: Path) -> None:
    """KEDA on, then off: the ScaledObjects go although this apply renders none."""
    server = FakeApiServer()
    api = fake_client(server)
    keda = ScorerOptions(mode="consumer-group", keda=True)
    commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api, options=keda)
    assert any("/scaledobjects/" in p for p in server.objects)
    _, lines = commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api,
                                  options=ScorerOptions(mode="consumer-group"))
    assert not any("/scaledobjects/" in p for p in server.objects)
    assert "deleted ScaledObject/headrace-views-r2" in lines
    kinds = server.objects[PARENT]["metadata"]["annotations"][
        "applyset.kubernetes.io/contains-group-kinds"]
    assert "ScaledObject" not in kinds


def test_objects_of_another_applyset_or_namespace_are_left_alone(two_streams: Path) -> None:
    server = FakeApiServer()
    api = fake_client(server)
    commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api)
    commands.run_apply(cluster_path=two_streams, namespace="other", api_client=api)
    foreign = {"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "not-ours", "namespace": "ml", "labels": {"app": "x"}}}
    server.objects[f"{STS}/not-ours"] = foreign
    drop_stream(two_streams, "views")
    drop_stream(two_streams, "clicks")
    commands.run_apply(cluster_path=two_streams, namespace="ml", api_client=api)
    assert names(server, STS) == {"not-ours"}
    assert len(names(server, "/apis/apps/v1/namespaces/other/statefulsets")) == 4


def test_a_parent_that_another_tool_owns_is_refused(two_streams: Path) -> None:
    server = FakeApiServer()
    server.objects[PARENT] = ApplySet(namespace="ml").parent(set())
    server.objects[PARENT]["metadata"]["annotations"]["applyset.kubernetes.io/tooling"] = (
        "kubectl/v1.30")
    with pytest.raises(ConfigError, match="not a headrace ApplySet parent") as info:
        commands.run_apply(cluster_path=two_streams, namespace="ml",
                           api_client=fake_client(server))
    assert "\n" not in str(info.value)
    assert len(server.objects) == 1
