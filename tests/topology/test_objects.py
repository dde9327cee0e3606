"""Every object objects.py and kubernetes_objects.py build passes strict schema validation."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from headrace.core.errors import ValidationFailed
from headrace.topology.objects import ScorerOptions, executor_rbac, scorer_objects
from headrace.topology.planning import plan_placement
from headrace.topology.training import (
    ScheduleSpec,
    TrainingJobSpec,
    request_objects,
    schedule_cronjob,
    training_objects,
)
from headrace.topology.validation import validate_all, validate_object


@pytest.fixture
def planned(make_cluster: Any, three_racks: Any) -> Any:
    three_racks["volumes"] = [{"name": "feat", "zones": ["z1"]}]
    three_racks["streams"].append({"name": "views", "partitions": 3, "volume": "feat",
                                   "rackCycle": ["r2"], "replicationFactor": 1})
    cluster = make_cluster(**three_racks)
    return cluster, plan_placement(cluster=cluster)


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def test_static_scorer_objects_validate_and_carry_the_plan(planned: Any) -> None:
    cluster, plan = planned
    objs = validate_all(scorer_objects(plan=plan, deploy=cluster.deploy,
                                       options=ScorerOptions(service_monitor=True)))
    sts = by_kind(objs, "StatefulSet")
    assert [s["metadata"]["name"] for s in sts] == [f"scorer-{g.name}" for g in plan.groups]
    assert len(by_kind(objs, "PodDisruptionBudget")) == len(by_kind(objs, "Service")) == len(sts)
    assert len(by_kind(objs, "ServiceMonitor")) == 1
    pod = sts[0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEADRACE_CLIENT_RACK"] == "r1" and env["HEADRACE_SCORER_DEVICE"] == "gpu:0"
    assert env["HEADRACE_SCORER_DECODE_PROCESSES"] == str(cluster.deploy.decode_processes)
    assert pod["terminationGracePeriodSeconds"] > int(env["HEADRACE_SCORER_GRACE_S"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"name": "dfs", "mountPath": "/dfs", "readOnly": True} in c["volumeMounts"]
    views = next(s for s in sts if s["metadata"]["labels"]["headrace.io/stream"] == "views")
    terms = views["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]} in terms[
        "matchExpressions"]


def test_consumer_group_mode_scales_with_keda_capped_by_partitions(planned: Any) -> None:
    cluster, plan = planned
    objs = validate_all(scorer_objects(plan=plan, deploy=cluster.deploy, options=ScorerOptions(
        mode="consumer-group", keda=True)))
    assert by_kind(objs, "StatefulSet") == []
    caps = {so["spec"]["scaleTargetRef"]["name"]: so["spec"]["maxReplicaCount"]
            for so in by_kind(objs, "ScaledObject")}
    assert caps == {f"scorer-{g.name}": len(g.partitions) for g in plan.groups}
    trig = by_kind(objs, "ScaledObject")[0]["spec"]["triggers"][0]["metadata"]
    assert trig["consumerGroup"] == "headrace-scorer.clicks" and trig["topic"] == "data.clicks"
    cmd = by_kind(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd == ["headrace", "score", "clicks"]


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
    sts = by_kind(validate_all(scorer_objects(plan=plan, deploy=cluster.deploy)), "StatefulSet")[0]
    cmd = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    env = _fake_headrace(tmp_path)
    for ordinal, pod in enumerate(plan.groups[0].pods):
        out = subprocess.run(cmd, env={**env, "HOSTNAME": f"scorer-clicks-r1-{ordinal}"},
                             capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["score", "clicks", "--partitions",
                                      ",".join(map(str, pod.partitions))]
    bad = subprocess.run(cmd, env={**env, "HOSTNAME": "scorer-clicks-r1-9"}, capture_output=True)
    assert bad.returncode == 64


def test_executor_rbac_validates_and_grants_podgroups_only_for_gangs() -> None:
    plain = validate_all(executor_rbac(namespace="ml", gang=False))
    gang = validate_all(executor_rbac(namespace="ml", gang=True))
    groups = [r["apiGroups"][0] for r in by_kind(gang, "Role")[0]["rules"]]
    assert "scheduling.volcano.sh" in groups
    assert "scheduling.volcano.sh" not in [r["apiGroups"][0] for r in by_kind(plain, "Role")[0][
        "rules"]]


def test_single_worker_job_retries_by_exit_code() -> None:
    spec = TrainingJobSpec(job_id="job:1", model_name="churn", framework="mxnet", image="img:1",
                           gpus_per_worker=1, gpu_type="a100", gang="volcano")
    [job] = validate_all(training_objects(spec))  # one worker: no gang, no Service
    s = job["spec"]
    assert s["backoffLimit"] == 3 and s["completionMode"] == "NonIndexed"
    assert s["podFailurePolicy"]["rules"][0] == {"action": "FailJob", "onExitCodes": {
        "containerName": "trainer", "operator": "In", "values": [2, 65]}}  # usage, permanent
    pod = s["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and "schedulerName" not in pod
    assert pod["containers"][0]["command"] == ["python", "-m", "headrace.trainers", "run", "job:1"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_multi_worker_tensorflow_is_a_volcano_gang_with_tf_config(tmp_path: Path) -> None:
    spec = TrainingJobSpec(job_id="job-7", model_name="churn", framework="tensorflow",
                           image="img:1", workers=3, gpus_per_worker=2, gang="volcano")
    pg, svc, job = validate_all(training_objects(spec))
    assert pg["kind"] == "PodGroup" and pg["spec"]["minMember"] == 3
    assert pg["spec"]["minResources"]["nvidia.com/gpu"] == "6"
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
    assert tf["cluster"]["worker"][0] == "train-job-7-0.train-job-7:2222"


def test_kueue_jobs_start_suspended_with_a_queue_label() -> None:
    spec = TrainingJobSpec(job_id="j2", model_name="m", framework="tensorflow", image="i",
                           workers=2, gang="kueue", queue="gpu-queue")
    objs = validate_all(training_objects(spec))
    assert [o["kind"] for o in objs] == ["Service", "Job"]
    assert objs[1]["spec"]["suspend"] is True
    assert objs[1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"


def test_schedules_become_cronjobs() -> None:
    cj = validate_object(schedule_cronjob(ScheduleSpec(name="nightly", cron="0 2 * * *",
                                                       image="i", timezone="UTC")))
    assert cj["spec"]["schedule"] == "0 2 * * *" and cj["spec"]["concurrencyPolicy"] == "Forbid"
    with pytest.raises(ValidationFailed):
        ScheduleSpec(name="nightly", cron="every day", image="i")


def test_a_train_request_maps_onto_a_validated_job(make_cluster: Any, three_racks: Any) -> None:
    from headrace.streams.contracts import Resources, TrainRequested

    req = TrainRequested(idempotency_key="k1", model_name="churn", framework="tensorflow",
                         dataset_uri="datasets/churn", resources=Resources(gpus=1, workers=2))
    objs = validate_all(request_objects(request=req, job_id="j9",
                                        deploy=make_cluster(**three_racks).deploy))
    assert [o["kind"] for o in objs] == ["PodGroup", "Service", "Job"]


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
