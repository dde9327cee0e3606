"""What the plan decides shows up in the objects ``topology apply`` creates (the chart rendered
with the plan's values by Helm's own engine), and every object validates strictly; likewise
the training objects ``kubernetes_objects`` builds."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from headrace.core.errors import ConfigError, ValidationFailed
from headrace.topology.commands import build_objects
from headrace.topology.planning import plan_placement
from headrace.topology.pod_security import manifest_violations
from headrace.topology.training import (
    TrainingJobSpec,
    request_objects,
    training_objects,
)
from headrace.topology.validation import validate_all, validate_object
from headrace.topology.values import ScorerOptions


@pytest.fixture
def planned(make_cluster: Any, three_racks: Any) -> Any:
    three_racks["volumes"] = [{"name": "feat", "zones": ["z1"], "claim": "feat-pvc"}]
    three_racks["streams"].append({"name": "views", "partitions": 3, "volume": "feat",
                                   "rackCycle": ["r2"], "replicationFactor": 1})
    cluster = make_cluster(**three_racks)
    return cluster, plan_placement(cluster=cluster)


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def test_static_scorer_objects_validate_and_carry_the_plan(planned: Any) -> None:
    cluster, plan = planned
    objs = build_objects(cluster=cluster, plan=plan, options=ScorerOptions(service_monitor=True))
    assert {o["metadata"]["namespace"] for o in objs} == {cluster.deploy.namespace}
    sts = by_kind(objs, "StatefulSet")
    assert [s["metadata"]["name"] for s in sts] == [f"headrace-{g.name}" for g in plan.groups]
    assert [s["spec"]["replicas"] for s in sts] == [len(g.pods) for g in plan.groups]
    assert len(by_kind(objs, "PodDisruptionBudget")) == len(by_kind(objs, "Service")) == len(sts)
    assert all(p["spec"]["maxUnavailable"] == 1 for p in by_kind(objs, "PodDisruptionBudget"))
    assert len(by_kind(objs, "ServiceMonitor")) == 1
    pod = sts[0]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "headrace-scorer"
    assert pod["automountServiceAccountToken"] is False
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEADRACE_CLIENT_RACK"] == "r1" and env["HEADRACE_SCORER_DEVICE"] == "gpu:0"
    assert env["HEADRACE_SCORER_DECODE_PROCESSES"] == str(cluster.deploy.decode_processes)
    assert pod["terminationGracePeriodSeconds"] > int(env["HEADRACE_SCORER_GRACE_S"])
    assert c["image"] == cluster.deploy.gpu_image  # a GPU group: the CUDA image
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"name": "dfs", "mountPath": "/dfs", "readOnly": True} in c["volumeMounts"]
    assert {"name": "dfs", "persistentVolumeClaim": {"claimName": "headrace-dfs"}} in pod[
        "volumes"]
    assert manifest_violations(sts[0]) == []
    views = next(s for s in sts if s["metadata"]["labels"]["headrace.io/stream"] == "views")
    vpod = views["spec"]["template"]["spec"]
    terms = vpod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]
    assert {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]} in terms[
        "matchExpressions"]
    assert {"name": "data", "mountPath": "/data/feat", "readOnly": True} in vpod["containers"][0][
        "volumeMounts"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "feat-pvc"}} in vpod["volumes"]


def test_deploy_settings_in_the_cluster_file_reach_the_objects(make_cluster: Any,
                                                                three_racks: Any) -> None:
    cluster = make_cluster(**three_racks, deploy={
        "namespace": "ml", "image": "reg.example:5000/ml/headrace@sha256:" + "a" * 64,
        "gpuImage": "reg.example:5000/ml/headrace:1.2-gpu", "dfsClaim": "shared-cephfs",
        "kafkaSecret": "corp-kafka", "graceSeconds": 45})
    objs = build_objects(cluster=cluster, plan=plan_placement(cluster=cluster))
    pod = by_kind(objs, "StatefulSet")[0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "reg.example:5000/ml/headrace:1.2-gpu"  # the planned groups use GPUs
    assert pod["terminationGracePeriodSeconds"] == 55
    assert {"name": "dfs", "persistentVolumeClaim": {"claimName": "shared-cephfs"}} in pod[
        "volumes"]
    secrets = {e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"] if "valueFrom" in e}
    assert secrets == {"corp-kafka"}
    assert {o["metadata"]["namespace"] for o in objs} == {"ml"}
    [binding] = by_kind(objs, "RoleBinding")
    assert binding["subjects"][0]["namespace"] == "ml"


def test_consumer_group_mode_scales_with_keda_capped_by_partitions(planned: Any) -> None:
    cluster, plan = planned
    objs = build_objects(cluster=cluster, plan=plan, options=ScorerOptions(
        mode="consumer-group", keda=True, keda_lag_threshold=500, keda_min_replicas=2))
    assert by_kind(objs, "StatefulSet") == []
    caps = {so["spec"]["scaleTargetRef"]["name"]: so["spec"]["maxReplicaCount"]
            for so in by_kind(objs, "ScaledObject")}
    assert caps == {f"headrace-{g.name}": len(g.partitions) for g in plan.groups}
    mins = {so["spec"]["minReplicaCount"] for so in by_kind(objs, "ScaledObject")}
    assert mins == {min(2, len(g.partitions)) for g in plan.groups}
    trig = by_kind(objs, "ScaledObject")[0]["spec"]["triggers"][0]["metadata"]
    assert trig["consumerGroup"] == "headrace-scorer.clicks" and trig["topic"] == "data.clicks"
    assert trig["lagThreshold"] == "500"
    deployments = by_kind(objs, "Deployment")
    assert all("replicas" not in d["spec"] for d in deployments)  # KEDA owns the count
    cmd = deployments[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd == ["headrace", "score", "clicks"]
    # ScaledObjects come after the Deployments they scale.
    kinds = [o["kind"] for o in objs]
    assert kinds.index("ScaledObject") > max(i for i, k in enumerate(kinds) if k == "Deployment")


def test_a_missing_chart_is_a_one_line_config_error(planned: Any, tmp_path: Path) -> None:
    cluster, plan = planned
    with pytest.raises(ConfigError, match="Helm chart not found") as info:
        build_objects(cluster=cluster, plan=plan, chart=tmp_path)
    assert "\n" not in str(info.value)


def _fake_headrace(tmp_path: Path) -> dict[str, str]:
    exe = tmp_path / "headrace"
    exe.write_text('#!/bin/sh\necho "$@"\nprintf "%s" "$TF_CONFIG" > "$OUT_TF"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "$@"\nprintf "%s" "$TF_CONFIG" > "$OUT_TF"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{tmp_path}:{os.environ['PATH']}", "OUT_TF": str(tmp_path / "tf.json")}


def test_each_statefulset_pod_runs_exactly_its_planned_partitions(planned: Any,
                                                                  tmp_path: Path) -> None:
    cluster, plan = planned
    sts = by_kind(build_objects(cluster=cluster, plan=plan), "StatefulSet")[0]
    cmd = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    env = _fake_headrace(tmp_path)
    for ordinal, pod in enumerate(plan.groups[0].pods):
        out = subprocess.run(cmd, env={**env, "HOSTNAME": f"headrace-clicks-r1-{ordinal}"},
                             capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["score", "clicks", "--partitions",
                                      ",".join(map(str, pod.partitions))]
    bad = subprocess.run(cmd, env={**env, "HOSTNAME": "headrace-clicks-r1-9"},
                         capture_output=True)
    assert bad.returncode == 64


@pytest.mark.parametrize(("trainer", "volcano"), [
    ({}, False), ({"workers": 2}, False), ({"workers": 2, "gang": "volcano"}, True),
    ({"gang": "kueue"}, False),
])
def test_executor_rbac_grants_podgroups_only_for_gangs(
        make_cluster: Any, three_racks: Any, trainer: dict[str, Any], volcano: bool) -> None:
    cluster = make_cluster(**three_racks, trainer=trainer)
    objs = build_objects(cluster=cluster, plan=plan_placement(cluster=cluster))
    accounts = {a["metadata"]["name"]: a for a in by_kind(objs, "ServiceAccount")}
    assert set(accounts) == {"headrace-control", "headrace-trainer", "headrace-scorer"}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    [role] = by_kind(objs, "Role")
    assert role["metadata"]["name"] == "headrace-control"
    assert ("scheduling.volcano.sh" in [r["apiGroups"][0] for r in role["rules"]]) is volcano


def test_single_worker_job_retries_by_exit_code() -> None:
    spec = TrainingJobSpec(job_id="job:1", model_name="churn", framework="mxnet", image="img:1",
                           gpus_per_worker=1, gpu_type="a100", gang="volcano")
    [job] = validate_all(training_objects(spec))  # one worker: no gang, no Service
    s = job["spec"]
    assert s["backoffLimit"] == 3 and s["completionMode"] == "NonIndexed"
    assert s["podFailurePolicy"]["rules"][0] == {"action": "FailJob", "onPodConditions": [],
                                                 "onExitCodes": {
        "containerName": "trainer", "operator": "In", "values": [2, 65]}}  # usage, permanent
    pod = s["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and "schedulerName" not in pod
    assert pod["containers"][0]["command"] == ["python", "-m", "headrace.trainers", "run", "job:1"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_multi_worker_tensorflow_is_a_volcano_gang_with_tf_config(tmp_path: Path) -> None:
    spec = TrainingJobSpec(job_id="job-7", model_name="churn", framework="tensorflow",
                           image="img:1", workers=3, gpus_per_worker=2, gang="volcano")
    job, pg, svc, _netpol = validate_all(training_objects(spec))
    assert pg["kind"] == "PodGroup" and pg["spec"]["minMember"] == 3
    # the whole gang's requests: 3 pods of 4 CPUs, 16 GiB and 2 GPUs each
    assert pg["spec"]["minResources"] == {"cpu": "12000m", "memory": str(3 * 16 * 2**30),
                                          "nvidia.com/gpu": "6"}
    assert svc["spec"]["clusterIP"] == "None"
    tmpl = job["spec"]["template"]
    assert tmpl["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == pg["metadata"]["name"]
    assert tmpl["spec"]["schedulerName"] == "volcano"
    assert tmpl["spec"]["subdomain"] == svc["metadata"]["name"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 3
    env = _fake_headrace(tmp_path)
    cmd = tmpl["spec"]["containers"][0]["command"]
    subprocess.run(cmd, env={**env, "JOB_COMPLETION_INDEX": "2"}, check=True, capture_output=True)
    tf = json.loads((tmp_path / "tf.json").read_text())
    assert tf["task"] == {"type": "worker", "index": 2}
    assert tf["cluster"]["worker"][0] == "train-job-7-worker-0-0.train-job-7:2222"


def test_kueue_jobs_start_suspended_with_a_queue_label() -> None:
    spec = TrainingJobSpec(job_id="j2", model_name="m", framework="tensorflow", image="i",
                           workers=2, gang="kueue", queue="gpu-queue")
    objs = validate_all(training_objects(spec))
    assert [o["kind"] for o in objs] == ["Job", "Service", "NetworkPolicy"]
    assert objs[0]["spec"]["suspend"] is True
    assert objs[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"


def test_a_train_request_maps_onto_a_validated_job(make_cluster: Any, three_racks: Any) -> None:
    from headrace.contracts import Resources, TrainRequested

    req = TrainRequested(idempotency_key="k1", model_name="churn", framework="tensorflow",
                         dataset_uri="datasets/churn", resources=Resources(gpus=1, workers=2))
    objs = validate_all(request_objects(request=req, job_id="j9",
                                        deploy=make_cluster(**three_racks).deploy))
    assert [o["kind"] for o in objs] == ["Job", "PodGroup", "Service", "NetworkPolicy"]


def test_multi_worker_mxnet_with_allreduce_is_refused_in_one_line() -> None:
    with pytest.raises(ValidationFailed, match="MXNet with strategy allreduce is not supported"):
        TrainingJobSpec(job_id="j", model_name="m", framework="mxnet", image="i", workers=2,
                        strategy="allreduce")


@pytest.mark.parametrize("broken", [
    {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
     "spec": {"scaleTargetRef": {"name": "d"}, "triggers": [], "maxReplicas": 3}},
    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "x"},
     "spec": {"minMember": 0}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
     "spec": {"selector": {}, "template": {}, "replica": 1}},
    {"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}},
])
def test_validation_rejects_unknown_fields_and_kinds(broken: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed):
        validate_object(broken)


@pytest.mark.parametrize(("image", "values"), [
    ("ghcr.io/headrace/headrace:0.1.0", {"repository": "ghcr.io/headrace/headrace",
                                         "tag": "0.1.0"}),
    ("reg.example:5000/ml/headrace", {"repository": "reg.example:5000/ml/headrace",
                                      "tag": "latest"}),
    ("reg.example:5000/ml/headrace@sha256:" + "b" * 64,
     {"repository": "reg.example:5000/ml/headrace", "digest": "sha256:" + "b" * 64}),
])
def test_the_deploy_image_becomes_the_charts_image_values(image: str,
                                                          values: dict[str, str]) -> None:
    from headrace.topology.values import image_values

    assert image_values(image) == values
