"""Render helm/headrace in-process (helm-python-sdk, Helm v4), lint it, and validate every
rendered object strictly: core kinds against the Kubernetes 1.30 OpenAPI schemas
(kubernetes-validate), CRDs (ScaledObject, TriggerAuthentication, ServiceMonitor) against the
schemas in headrace.topology.crd_schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from headrace.topology.cluster import parse_cluster
from headrace.topology.planning import plan_placement
from headrace.topology.validation import validate_object
from headrace.topology.values import chart_values
from tests.topology.conftest import cpu_node, gpu_node

CHART = Path(__file__).resolve().parents[2] / "helm" / "headrace"
GROUP = {"name": "clicks-r1", "stream": "clicks", "partitions": [0, 1, 2, 3], "replicas": 2,
         "clientRack": "r1", "gpu": 1,
         "nodeAffinity": [{"key": "topology.headrace.io/rack", "operator": "In", "values": ["r1"]}]}


def planner_values() -> dict[str, Any]:
    cluster = parse_cluster({
        "nodes": [gpu_node("a1", "r1", "z1", 2, "a100"), gpu_node("a2", "r2", "z1", 2, "a100"),
                  cpu_node("c1", "r1", "z1")],
        "volumes": [{"name": "feat", "nodes": ["a2"], "claim": "feat-pvc"}],
        "streams": [{"name": "clicks", "partitions": 10, "rackCycle": ["r1", "r2"],
                     "replicationFactor": 1, "gpuType": "a100"},
                    {"name": "views", "partitions": 3, "volume": "feat", "rackCycle": ["r2"]}],
        "scorer": {"gpus": 1, "maxPartitionsPerPod": 4},
    })
    return chart_values(plan=plan_placement(cluster=cluster), deploy=cluster.deploy)


VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "cpu-only": {"scorerGroups": [{**GROUP, "gpu": 0, "podPartitions": [[0, 2], [1, 3]]}],
                 "trainer": {"executor": "local"}},
    "gpu-scorers": {"scorerGroups": [{**GROUP, "podPartitions": [[0, 1], [2, 3]],
                                      "gpuType": "a100"}],
                    "scorer": {"tolerations": [{"key": "dedicated", "operator": "Equal",
                                                "value": "ml", "effect": "NoSchedule"}]},
                    "dfs": {"existingClaim": "shared-cephfs"}, "serviceMonitor": {"enabled": True}},
    "gang-training": {"trainer": {"gang": "volcano", "queue": "gpu", "gpuType": "a100"}},
    "keda": {"keda": {"enabled": True},
             "scorerGroups": [GROUP, {**GROUP, "name": "clicks-r2", "partitions": [4, 5]}],
             "kafka": {"bootstrap": "b:9093", "tls": {"enabled": True, "caSecret": "kafka-ca"},
                       "sasl": {"enabled": True, "username": "u", "password": "p"}}},
    "planner": planner_values(),
}


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


@pytest.fixture(scope="module")
def rendered(chart: Any) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name, values in VALUE_SETS.items():
        docs = chart.render(values, name="hr", namespace="ml")
        out[name] = [d for path, text in sorted(docs.items()) if path.endswith(".yaml")
                     for d in yaml.safe_load_all(text) if d]
    return out


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_chart_lints_without_errors(name: str) -> None:
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True, kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_rendered_object_validates_strictly(rendered: Any, name: str) -> None:
    docs = rendered[name]
    assert docs
    for doc in docs:
        validate_object(doc)


def test_default_values_deploy_control_plane_pvc_secret_and_rbac(rendered: Any) -> None:
    docs = rendered["default"]
    assert sorted(d["kind"] for d in docs) == [
        "Deployment", "PersistentVolumeClaim", "Role", "RoleBinding", "Secret", "ServiceAccount"]
    pvc = kinds(docs, "PersistentVolumeClaim")[0]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    ctl = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]
    assert ctl["containers"][0]["command"] == ["headrace", "control"]
    assert ctl["serviceAccountName"] == "hr-headrace-trainer"
    role = kinds(docs, "Role")[0]
    assert {"apiGroups": ["batch"], "resources": ["jobs"],
            "verbs": ["create", "get", "list", "watch", "delete"]} in role["rules"]
    assert "scheduling.volcano.sh" not in str(role["rules"])


def test_gang_training_grants_podgroups(rendered: Any) -> None:
    rules = kinds(rendered["gang-training"], "Role")[0]["rules"]
    assert {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
            "verbs": ["create", "get", "list", "delete"]} in rules


def test_gpu_scorers_get_gpu_limits_tolerations_affinity_and_a_long_grace(rendered: Any) -> None:
    docs = rendered["gpu-scorers"]
    [sts] = kinds(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert sts["spec"]["replicas"] == 2
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"]
    assert pod["tolerations"][0]["key"] == "dedicated"
    exprs = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["a100"]} in exprs
    assert pod["terminationGracePeriodSeconds"] == 30
    assert "0) P=0,1 ;; 1) P=2,3 ;;" in c["command"][2]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "shared-cephfs"
    assert kinds(docs, "PersistentVolumeClaim") == []
    assert len(kinds(docs, "ServiceMonitor")) == len(kinds(docs, "PodDisruptionBudget")) == 1


def test_cpu_only_scorers_ask_for_no_gpu(rendered: Any) -> None:
    [sts] = kinds(rendered["cpu-only"], "StatefulSet")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in str(c["resources"])
    assert {"name": "HEADRACE_SCORER_DEVICE", "value": "cpu"} in c["env"]
    assert {"name": "HEADRACE_SCORER_DECODE_PROCESSES", "value": "1"} in c["env"]
    assert kinds(rendered["cpu-only"], "Role") == []  # local executor: no Job RBAC


def test_keda_scales_consumer_group_scorers_capped_by_partitions(rendered: Any) -> None:
    docs = rendered["keda"]
    caps = {s["metadata"]["name"]: s["spec"]["maxReplicaCount"]
            for s in kinds(docs, "ScaledObject")}
    assert caps == {"hr-headrace-clicks-r1": 4, "hr-headrace-clicks-r2": 2}
    assert all("replicas" not in d["spec"] for d in kinds(docs, "Deployment")
               if d["metadata"]["labels"].get("app.kubernetes.io/component") == "scorer")
    [auth] = kinds(docs, "TriggerAuthentication")
    assert {r["parameter"] for r in auth["spec"]["secretTargetRef"]} == {
        "sasl", "username", "password", "tls"}
    secret = kinds(docs, "Secret")[0]["stringData"]
    import json

    cfg = json.loads(secret["config"])
    assert cfg["security.protocol"] == "SASL_SSL"
    assert cfg["ssl.ca.location"] == "/etc/headrace/kafka-tls/ca.crt"
    assert secret["bootstrap"] == "b:9093"


def test_planner_values_render_one_statefulset_per_locality_group(rendered: Any) -> None:
    values = VALUE_SETS["planner"]
    sts = kinds(rendered["planner"], "StatefulSet")
    assert [s["metadata"]["name"] for s in sts] == [
        f"hr-headrace-{g['name']}" for g in values["scorerGroups"]]
    for s, g in zip(sts, values["scorerGroups"], strict=True):
        assert s["spec"]["replicas"] == len(g["podPartitions"])
        env = {e["name"]: e.get("value") for e in s["spec"]["template"]["spec"]["containers"][0][
            "env"]}
        assert env["HEADRACE_CLIENT_RACK"] == g["clientRack"]
    views = next(s for s in sts if "views" in s["metadata"]["name"])
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "feat-pvc"}} in views["spec"][
        "template"]["spec"]["volumes"]


@pytest.mark.parametrize("bad", [
    {"scorerGroups": [{**GROUP, "name": "Bad_Name"}]},
    {"scorerGroups": [{**GROUP, "gpu": 99}]},
    {"scorerGroups": [{k: v for k, v in GROUP.items() if k != "partitions"}]},
    {"scorerGroups": [{**GROUP, "partitionz": [1]}]},
    {"trainer": {"gang": "slurm"}},
    {"kafka": {"bootstrap": "", "existingSecret": ""}},
    {"dfs": {"root": "relative/path"}},
    {"replicaCount": 3},
    {"scorer": {"decodeProcesses": -1}},
])
def test_values_schema_rejects_bad_values(chart: Any, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values(bad))
    with pytest.raises(helm.HelmError):
        chart.render(bad, name="hr", namespace="ml")


def test_values_schema_accepts_every_value_set(chart: Any) -> None:
    for values in VALUE_SETS.values():
        chart.validate_schema(chart.merge_values(values))
