"""``headrace topology apply`` against a real kube-apiserver (tests/real_kube.py): the chart
rendered for several value sets is admitted under the ``restricted`` Pod Security Standard, a
second apply changes nothing, a removed stream's objects are pruned, and the scheduler binds the
scorer pods where the placement plan says. Server-side apply: field ownership, conflicts with
another manager refused unless forced, a dropped field removed, a client-side apply taken over."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.core.errors import ConfigError
from headrace.topology import commands
from headrace.topology.applyset import PART_OF, ApplySet, Writer
from headrace.topology.kube_rest import CLIENT_SIDE_MANAGERS, KINDS, Ref, Rest
from headrace.topology.values import ScorerOptions
from tests.kube import inventory
from tests.kube.conftest import Api, wait_for

pytestmark = pytest.mark.slow

WORKLOADS = {"StatefulSet": "statefulsets", "Deployment": "deployments"}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def member_paths(api: Api, ns: str) -> dict[str, str]:
    """Every object of the namespace labelled as the ApplySet's member: path -> its
    ``generation`` where it has one (the controllers' status writes move its resourceVersion,
    not its generation), else its resourceVersion."""
    aset = ApplySet(namespace=ns)
    out = {}
    for (group, _kind), (version, plural) in KINDS.items():
        if group in ("keda.sh", "monitoring.coreos.com"):
            continue  # no CRDs installed
        root = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for o in api.items(f"{root}/namespaces/{ns}/{plural}",
                           labelSelector=f"{PART_OF}={aset.id}"):
            meta = o["metadata"]
            out[f"{root}/namespaces/{ns}/{plural}/{meta['name']}"] = \
                f"generation {meta['generation']}" if meta.get("generation") \
                else f"rv {meta['resourceVersion']}"
    parent = api.get(f"/api/v1/namespaces/{ns}/configmaps/{aset.name}")
    out[f"configmap/{aset.name}"] = parent["metadata"]["resourceVersion"]
    return out


def workloads(api: Api, ns: str) -> list[dict[str, Any]]:
    return [o for kind, plural in WORKLOADS.items()
            for o in api.items(f"/apis/apps/v1/namespaces/{ns}/{plural}")]


def admitted_under_restricted(api: Api, ns: str, workload: dict[str, Any]) -> None:
    """The workload's pod template, created as a Pod (server dry run) in the namespace: the
    PodSecurity admission enforces ``restricted`` on it exactly as on the controller's pods."""
    tmpl = workload["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "psa-", "namespace": ns,
                        "labels": tmpl["metadata"].get("labels", {})},
           "spec": tmpl["spec"]}
    status, data = api.request("POST", f"/api/v1/namespaces/{ns}/pods", pod,
                               query=[("dryRun", "All")])
    assert status == 201, f"{workload['kind']}/{workload['metadata']['name']}: " \
                          f"{status} {data.get('message')}"


def pods_of(api: Api, ns: str, workload: dict[str, Any]) -> list[dict[str, Any]]:
    sel = ",".join(f"{k}={v}" for k, v in workload["spec"]["selector"]["matchLabels"].items())
    return api.items(f"/api/v1/namespaces/{ns}/pods", labelSelector=sel)


def all_pods_bound(api: Api, ns: str) -> dict[str, list[dict[str, Any]]] | None:
    """group -> its pods, once every workload has all its pods bound to a node."""
    out = {}
    for w in workloads(api, ns):
        pods = [p for p in pods_of(api, ns, w) if p["spec"].get("nodeName")]
        if len(pods) != w["spec"]["replicas"]:
            return None
        out[w["metadata"]["labels"]["headrace.io/group"]] = pods
    return out


VALUE_SETS: dict[str, tuple[dict[str, Any], ScorerOptions]] = {
    # A StatefulSet per locality group on GPU nodes, the views group beside its data volume.
    "static-gpu": ({}, ScorerOptions()),
    # Consumer-group Deployments instead.
    "consumer-group": ({}, ScorerOptions(mode="consumer-group")),
    # CPU scorers, one stream on two racks.
    "cpu-only": ({"scorer": {"gpus": 0, "cpuMillis": 500, "memoryMiB": 512,
                             "maxPartitionsPerPod": 2},
                  "streams": [{"name": "clicks", "partitions": 4, "rackCycle": ["r2", "r3"],
                               "replicationFactor": 1}]}, ScorerOptions()),
}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_chart_is_admitted_placed_idempotent_and_pruned(
        value_set: str, tmp_path: Path, api: Api, api_client: Any, namespace: str) -> None:
    extra, options = VALUE_SETS[value_set]
    data = inventory.cluster_file(**extra)
    path = write(tmp_path, data)
    plan, first = commands.run_apply(cluster_path=path, namespace=namespace,
                                     api_client=api_client, options=options)
    assert first and all(line.startswith("created ") for line in first), first

    # Every workload's pods pass restricted Pod Security, and the controllers made them.
    ws = workloads(api, namespace)
    assert len(ws) == len(plan.groups)
    for w in ws:
        admitted_under_restricted(api, namespace, w)
    bound = wait_for(lambda: all_pods_bound(api, namespace), timeout_s=90,
                     what="every scorer pod created and bound by the scheduler")

    # The scheduler put each group in its rack, on its GPU type, beside its data volume.
    nodes = {n["name"]: n for n in inventory.NODES}
    for g in plan.groups:
        for p in bound[g.name]:
            node = nodes[p["spec"]["nodeName"]]
            assert node["rack"] == g.rack, (g.name, node["name"])
            env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0].get("env", [])}
            # Kafka fetches from the replica in the pod's own rack (client.rack).
            assert env.get("HEADRACE_CLIENT_RACK") == g.client_rack == node["rack"]
            if g.gpus:
                assert node.get("gpus"), (g.name, node["name"])
                if g.gpu_type:
                    assert node["gpuType"] == g.gpu_type
            else:
                assert not node.get("gpus"), (g.name, node["name"])
            if g.volume:
                assert node["name"] in next(v["nodes"] for v in inventory.VOLUMES
                                            if v["name"] == g.volume)

    # A second apply of the same file changes nothing on the server (server-side apply
    # writes nothing: each member's resourceVersion is the one read before).
    before = member_paths(api, namespace)
    _, second = commands.run_apply(cluster_path=path, namespace=namespace,
                                   api_client=api_client, options=options)
    assert [line for line in second if not line.startswith("unchanged ")] == []
    assert member_paths(api, namespace) == before

    # A stream removed from the file: its objects are deleted, the others stay.
    gone = data["streams"][-1]["name"]
    if len(data["streams"]) > 1:
        data["streams"] = data["streams"][:-1]
        write(tmp_path, data)
        _, third = commands.run_apply(cluster_path=path, namespace=namespace,
                                      api_client=api_client, options=options)
        deleted = [line for line in third if line.startswith("deleted ")]
        assert deleted and all(gone in line for line in deleted), third
        left = member_paths(api, namespace)
        assert not [p for p in left if f"-{gone}-" in p], left
        assert [p for p in left if "statefulsets" in p or "deployments" in p]


def test_a_plan_the_live_cluster_cannot_hold_leaves_pods_pending_and_explain_says_why(
        tmp_path: Path, api: Api, api_client: Any, namespace: str, kubeconfig: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster file says gpu-t3 has four A100s; the live node has two T4s. The planner
    places a rack-r3 A100 group there, the scheduler binds none of its pods, and
    ``topology explain --live`` prints the scheduler's reason."""
    from typer.testing import CliRunner

    from headrace.cli.topology_cmd import app

    data = inventory.cluster_file(streams=[
        {"name": "clicks", "partitions": 3, "rackCycle": ["r1", "r2", "r3"],
         "replicationFactor": 1, "gpuType": "a100"}])
    stale = next(n for n in data["nodes"] if n["name"] == "gpu-t3")
    stale.update(gpus=4, gpuType="a100")
    path = write(tmp_path, data)
    plan, _ = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    [r3] = [g for g in plan.groups if g.rack == "r3"]

    def r3_pending() -> list[dict[str, Any]] | None:
        pods = api.items(f"/api/v1/namespaces/{namespace}/pods",
                         labelSelector=f"headrace.io/group={r3.name}")
        told = [p for p in pods if any(c["type"] == "PodScheduled" and c["status"] == "False"
                                       for c in p["status"].get("conditions", []))]
        return told if told and len(told) == len(pods) else None

    pending = wait_for(r3_pending, timeout_s=60, what="the scheduler to refuse the r3 pods")
    assert all(not p["spec"].get("nodeName") for p in pending)
    # The other racks' groups are placed: only the stale node's group is stuck.
    others = wait_for(lambda: all_pods_bound_except(api, namespace, r3.name), timeout_s=60,
                      what="the other groups bound")
    assert others

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    res = CliRunner().invoke(app, ["explain", "--cluster", str(path), "--live",
                                   "--namespace", namespace])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line.startswith("[unscheduled]")]
    assert len(lines) == len(pending), res.output
    for line in lines:
        assert f"(group {r3.name})" in line and "Unschedulable" in line
        assert "node affinity/selector" in line or "nvidia.com/gpu" in line, line


def all_pods_bound_except(api: Api, ns: str, group: str) -> bool:
    for w in workloads(api, ns):
        if w["metadata"]["labels"]["headrace.io/group"] == group:
            continue
        if len([p for p in pods_of(api, ns, w) if p["spec"].get("nodeName")]) \
                != w["spec"]["replicas"]:
            return False
    return True


def managers(obj: dict[str, Any]) -> set[tuple[str, str]]:
    return {(e["manager"], e["operation"]) for e in obj["metadata"].get("managedFields", [])
            if not e.get("subresource")}


def test_server_side_apply_takes_over_removes_dropped_fields_and_refuses_conflicts(
        tmp_path: Path, api: Api, api_client: Any, namespace: str) -> None:
    """The client-side applier first (as a cluster applied before server-side apply), then
    server-side: its fields are handed to the ``headrace`` manager; another manager's edit is
    a conflict, refused unless forced; a GPU scorer turned CPU-only loses its GPU limit and
    toleration (a strategic merge patch kept them)."""
    data = inventory.cluster_file(streams=[{"name": "clicks", "partitions": 2,
                                            "rackCycle": ["r1"], "replicationFactor": 1}])
    path = write(tmp_path, data)
    sts = f"/apis/apps/v1/namespaces/{namespace}/statefulsets/headrace-clicks-r1"
    commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client,
                       server_side=False)
    assert ("headrace-client-side", "Update") in managers(api.get(sts))

    _, taken = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    assert taken and not [line for line in taken if line.startswith(("created", "deleted"))]
    for kind, plural in WORKLOADS.items():
        for o in api.items(f"/apis/apps/v1/namespaces/{namespace}/{plural}"):
            owners = managers(o)
            assert ("headrace", "Apply") in owners, (kind, owners)
            assert not {m for m, _ in owners} & set(CLIENT_SIDE_MANAGERS), (kind, owners)
    _, again = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    assert [line for line in again if not line.startswith("unchanged ")] == []
    _, dry = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client,
                                dry_run=True)  # server dry runs: the same answer, no write
    assert [line for line in dry if not line.startswith("unchanged ")] == []

    # Someone scales the scorers by hand: server-side apply will not silently undo it.
    replicas = api.get(sts)["spec"]["replicas"]
    status, _ = api.request("PATCH", sts, {"spec": {"replicas": replicas + 3}},
                            query=[("fieldManager", "kubectl-edit")],
                            content_type="application/merge-patch+json")
    assert status == 200
    with pytest.raises(ConfigError, match=r"\.spec\.replicas.*kubectl-edit"):
        commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client,
                           dry_run=True)  # a dry run meets the same conflict
    with pytest.raises(ConfigError, match=r"\.spec\.replicas.*kubectl-edit") as refused:
        commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    assert "\n" not in str(refused.value) and "--force-conflicts" in str(refused.value)
    assert api.get(sts)["spec"]["replicas"] == replicas + 3
    _, forced = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client,
                                   force_conflicts=True)
    assert "patched StatefulSet/headrace-clicks-r1" in forced
    assert api.get(sts)["spec"]["replicas"] == replicas

    # The scorers lose their GPU: the server drops the limit and the toleration headrace
    # applied before and no longer renders.
    pod = api.get(sts)["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"].get("nvidia.com/gpu") == "1"
    assert any(t.get("key") == inventory.GPU for t in pod.get("tolerations", []))
    data["scorer"] = {"gpus": 0, "cpuMillis": 500, "memoryMiB": 512, "maxPartitionsPerPod": 4}
    write(tmp_path, data)
    _, dry = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client,
                                dry_run=True)
    assert "patch StatefulSet/headrace-clicks-r1" in dry and \
        "unchanged ServiceAccount/headrace-scorer" in dry, dry
    _, cpu = commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    assert "patched StatefulSet/headrace-clicks-r1" in cpu, cpu
    pod = api.get(sts)["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"].get("limits", {}), pod
    assert not any(t.get("key") == inventory.GPU for t in pod.get("tolerations", [])), pod


class _BusyController(Rest):
    """A Rest whose every read is followed by what controllers do on a live cluster: a status
    write, and an annotation of another manager's own."""

    def get(self, ref: Ref) -> dict[str, Any] | None:
        live = super().get(ref)
        if live is not None:
            api, path = Api(self.api), ref.path()
            count = (live.get("status") or {}).get("collisionCount", 0)
            api.patch_status(path, {"collisionCount": count + 1})
            status, _ = api.request(
                "PATCH", path,
                {"metadata": {"annotations": {"example.org/seen": uuid.uuid4().hex}}},
                query=[("fieldManager", "some-controller")],
                content_type="application/merge-patch+json")
            assert status == 200, status
        return live


def test_an_apply_that_changes_nothing_is_unchanged_though_controllers_write_in_between(
        api: Api, api_client: Any, namespace: str) -> None:
    """The second apply of one manifest is ``unchanged`` even when a controller writes the
    object's status and an annotation of its own between the read and the apply (the
    resourceVersion moves; nothing the apply owns does); a changed field is still a patch."""
    sts: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "busy", "namespace": namespace,
                        "labels": {"app.kubernetes.io/name": "busy"}},
           "spec": {"replicas": 0, "serviceName": "busy",
                    "selector": {"matchLabels": {"app": "busy"}},
                    "template": {"metadata": {"labels": {"app": "busy"}},
                                 "spec": {"containers": [{"name": "c", "image": "busy:1"}]}}}}
    plain, busy = Writer(Rest(api_client)), Writer(_BusyController(api_client))
    assert plain(sts) == "create"
    path = f"/apis/apps/v1/namespaces/{namespace}/statefulsets/busy"
    rv = api.get(path)["metadata"]["resourceVersion"]
    assert busy(sts) == "unchanged"
    live = api.get(path)
    assert live["metadata"]["resourceVersion"] != rv  # the controller did write in between
    assert live["status"]["collisionCount"] >= 1
    changed = copy.deepcopy(sts)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "busy:2"
    assert busy(changed) == "patch"
    assert api.get(path)["spec"]["template"]["spec"]["containers"][0]["image"] == "busy:2"
    dropped = copy.deepcopy(changed)
    del dropped["metadata"]["labels"]  # a field the apply owned and no longer sets
    assert busy(dropped) == "patch"
    assert "app.kubernetes.io/name" not in (api.get(path)["metadata"].get("labels") or {})
