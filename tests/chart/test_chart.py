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


SCHEDULE = {"name": "nightly", "cron": "0 2 * * *",
            "request": {"model_name": "demo", "framework": "tensorflow",
                        "dataset_uri": "datasets/demo.parquet", "spec": {"epochs": 3}}}


DRIFT_RULE = {"name": "drifted", "kind": "drift", "stream": "clicks", "features": ["f0"],
              "min_windows": 2, "request": {"model_name": "demo", "framework": "mxnet",
                                            "dataset_uri": "datasets/demo.parquet"}}
EVENT_RULE = {"name": "fresh", "stream": "clicks", "every": 10000,
              "request": DRIFT_RULE["request"]}


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


# The DFS needs a ReadWriteMany class or an existing claim (the schema requires one).
DFS = {"storageClassName": "cephfs"}
MSK = "b-1.msk.example:9096,b-2.msk.example:9096,b-3.msk.example:9096"


def with_dfs(values: dict[str, Any]) -> dict[str, Any]:
    dfs = values.get("dfs", {})
    return values if dfs.get("existingClaim") else {**values, "dfs": {**DFS, **dfs}}


_VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "cpu-only": {"scorerGroups": [{**GROUP, "gpu": 0, "podPartitions": [[0, 2], [1, 3]]}],
                 "trainer": {"executor": "local"}},
    "gpu-scorers": {"scorerGroups": [{**GROUP, "podPartitions": [[0, 1], [2, 3]],
                                      "gpuType": "a100", "runtime": "torch",
                                      "precision": "fp16"}],
                    "scorer": {"tolerations": [{"key": "dedicated", "operator": "Equal",
                                                "value": "ml", "effect": "NoSchedule"}]},
                    "dfs": {"existingClaim": "shared-cephfs"}, "serviceMonitor": {"enabled": True}},
    "gang-training": {"trainer": {"gang": "volcano", "queue": "gpu", "gpuType": "a100"}},
    "keda": {"keda": {"enabled": True},
             "scorerGroups": [GROUP, {**GROUP, "name": "clicks-r2", "partitions": [4, 5]}],
             "kafka": {"bootstrap": "b:9093", "tls": {"enabled": True, "caSecret": "kafka-ca"},
                       "sasl": {"enabled": True, "username": "u", "password": "p"}}},
    "planner": planner_values(),
    "kueue": {"trainer": {"gang": "kueue", "queue": "team-a", "gpuType": "h100"},
              "limits": {"maxGpus": 8, "maxWorkers": 4}},
    "existing-secret": {"kafka": {"existingSecret": "corp-kafka", "bootstrap": "",
                                  "sasl": {"enabled": True, "mechanism": "SCRAM-SHA-256"},
                                  "tls": {"enabled": True, "caSecret": "corp-ca"}},
                        # the bootstrap is in that Secret: the brokers' ports are given
                        "networkPolicy": {"kafka": {"ports": [9093]}},
                        "keda": {"enabled": True}, "scorerGroups": [GROUP]},
    "schedules": {"controlPlane": {"triggers": {"schedules": [SCHEDULE]}},
                  "schedules": {"cronJobs": True},
                  "limits": {"maxLayers": 16, "maxParameters": 10_000_000, "maxEpochs": 100,
                             "maxGpus": 8, "maxWorkers": 4, "maxDatasetBytes": 10**11}},
    # MSK over SASL/SCRAM (9096) with NodeLocal DNS, a private registry, IRSA and a mixed fleet.
    "msk-nodelocal": {
        "kafka": {"bootstrap": MSK, "tls": {"enabled": True},
                  "sasl": {"enabled": True, "username": "u", "password": "p"}},
        "networkPolicy": {"dns": {"preset": "nodelocal"}, "kafka": {"extraPorts": [9098]}},
        "imagePullSecrets": ["regcred", {"name": "mirror"}],
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/hr"},
                           "roleAnnotations": {"control": {"owner": "ml-platform"}}},
        "scorerGroups": [GROUP, {**GROUP, "name": "clicks-cpu", "gpu": 0, "partitions": [4]}],
        "controlPlane": {"triggers": {"schedules": [SCHEDULE]}}, "schedules": {"cronJobs": True},
    },
    # Strimzi with mTLS: the cluster CA Secret and the KafkaUser's Secret; OpenShift DNS.
    "strimzi-mtls-openshift": {
        "kafka": {"bootstrap": "my-cluster-kafka-bootstrap.kafka.svc:9093",
                  "tls": {"enabled": True, "caSecret": "my-cluster-cluster-ca-cert",
                          "clientCertSecret": "headrace-user"}},
        "networkPolicy": {"dns": {"preset": "openshift"}},
        "keda": {"enabled": True}, "scorerGroups": [GROUP],
        "controlPlane": {"triggers": {"schedules": [SCHEDULE]}}, "schedules": {"cronJobs": True},
    },
    "existing-service-accounts": {"serviceAccount": {"create": False, "name": "corp"},
                                  "scorerGroups": [GROUP]},
    # Drift on every group but one (its own `drift:` turns it off), one with its own rate;
    # a drift rule and an event rule in the triggers.
    "drift": {"scorer": {"drift": {"enabled": True, "windowRecords": 500}},
              "scorerGroups": [
                  {**GROUP, "gpu": 0},
                  {**GROUP, "gpu": 0, "name": "clicks-off", "partitions": [4],
                   "drift": {"enabled": False}},
                  {**GROUP, "gpu": 0, "name": "clicks-strict", "partitions": [5],
                   "drift": {"falseAlarmRate": 0.001, "windowSeconds": 60}}],
              "controlPlane": {"triggers": {"rules": [DRIFT_RULE, EVENT_RULE]}}},
    # A scheduled live gate judging the clicks stream's shadow or canary every hour.
    "live-gate": {"liveGates": [{"name": "clicks-hourly", "model": "clicks", "stream": "clicks",
                                 "cron": "0 * * * *"}],
                  "scorerGroups": [{**GROUP, "gpu": 0}]},
}
VALUE_SETS = {name: with_dfs(v) for name, v in _VALUE_SETS.items()}


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


def render_docs(chart: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    docs = chart.render(values, name="hr", namespace="ml")
    return [d for path, text in sorted(docs.items()) if path.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def rendered(chart: Any) -> dict[str, list[dict[str, Any]]]:
    return {name: render_docs(chart, values) for name, values in VALUE_SETS.items()}


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


def test_default_values_deploy_control_plane_pvc_secret_rbac_and_network_policies(
        rendered: Any) -> None:
    docs = rendered["default"]
    assert sorted(d["kind"] for d in docs) == [
        "Deployment", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy",
        "PersistentVolumeClaim", "Role", "RoleBinding", "Secret", "ServiceAccount",
        "ServiceAccount"]
    pvc = kinds(docs, "PersistentVolumeClaim")[0]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    ctl = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]
    assert ctl["containers"][0]["command"] == ["headrace", "control"]
    # The control plane has its own identity; trainer pods get one with no rights or token.
    assert ctl["serviceAccountName"] == "hr-headrace-control"
    assert ctl["automountServiceAccountToken"] is True
    accounts = {a["metadata"]["name"]: a for a in kinds(docs, "ServiceAccount")}
    assert set(accounts) == {"hr-headrace-control", "hr-headrace-trainer"}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    [binding] = kinds(docs, "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == ["hr-headrace-control"]
    role = kinds(docs, "Role")[0]
    assert {"apiGroups": ["batch"], "resources": ["jobs"],
            "verbs": ["create", "get", "list", "watch", "patch", "delete"]} in role["rules"]
    assert "cronjobs" not in str(role["rules"])
    assert "scheduling.volcano.sh" not in str(role["rules"])
    c = ctl["containers"][0]
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "probes"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEADRACE_EXECUTOR"] == "kubernetes"
    assert env["HEADRACE_K8S_SERVICE_ACCOUNT"] == "hr-headrace-trainer"
    assert env["HEADRACE_CONTROL_HTTP_PORT"] == "8081"
    assert env["HEADRACE_REPLICATION_FACTOR"] == "3"
    assert env["HEADRACE_MIN_INSYNC_REPLICAS"] == "2"


def test_network_policies_let_scorers_and_trainers_reach_dns_kafka_and_the_dfs_only(
        chart: Any) -> None:
    values = {"networkPolicy": {"dfs": [{"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}],
                                         "ports": [{"port": 2049, "protocol": "TCP"}]}]}}
    docs = render_docs(chart, with_dfs(values))
    pols = {p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: p["spec"]
            for p in kinds(docs, "NetworkPolicy")}
    assert set(pols) == {"scorer", "trainer", "schedule", "control-plane"}
    for component, spec in pols.items():
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        ports = [sorted(p["port"] for p in rule.get("ports", [])) for rule in spec["egress"]]
        # DNS, the bootstrap's one port (kafka-bootstrap.kafka.svc:9092), the DFS rule
        assert ports[:3] == [[53, 53], [9092], [2049]], component
        extra = spec["egress"][3:]
        # Trainers also reach each other on the gang's ports; nothing else goes anywhere.
        gang = [{"port": 2222, "protocol": "TCP"}, {"port": 9091, "protocol": "TCP"},
                {"port": 32768, "endPort": 60999, "protocol": "TCP"}]
        peers = {"trainer": [{"to": [{"podSelector": {"matchLabels": {
            "app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": "trainer"}}}],
            "ports": gang}],
            "control-plane": [{"ports": [{"port": 443, "protocol": "TCP"},
                                         {"port": 6443, "protocol": "TCP"}]}]}
        assert extra == peers.get(component, []), component
    assert pols["scorer"]["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]
    for d in docs:
        validate_object(d)


def test_sasl_password_is_only_in_the_secret_and_mounted_as_a_file(rendered: Any) -> None:
    docs = rendered["keda"]
    text = yaml.safe_dump_all(docs)
    [secret] = kinds(docs, "Secret")
    assert secret["stringData"]["password"] == "p"
    assert text.count(": p\n") == 1  # the Secret's password key, nowhere else
    assert "sasl.password" not in secret["stringData"]["config"]
    for w in [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]:
        pod = w["spec"]["template"]
        assert pod["metadata"]["annotations"] == {"headrace.io/credentials-revision": "1"}
        c = pod["spec"]["containers"][0]
        env = {e["name"]: e for e in c["env"]}
        assert env["HEADRACE_KAFKA_PASSWORD_FILE"]["value"] == "/etc/headrace/kafka-sasl/password"
        assert {"name": "kafka-sasl", "mountPath": "/etc/headrace/kafka-sasl",
                "readOnly": True} in c["volumeMounts"]
        vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "kafka-sasl")
        assert vol["secret"]["items"] == [{"key": "password", "path": "password"}]


def test_bumping_credentials_revision_rolls_pods(chart: Any) -> None:
    values = with_dfs({"kafka": {"credentialsRevision": "2024-06-rotation"}})
    [ctl] = kinds(render_docs(chart, values), "Deployment")
    assert ctl["spec"]["template"]["metadata"]["annotations"] == {
        "headrace.io/credentials-revision": "2024-06-rotation"}


def test_gang_training_grants_podgroups(rendered: Any) -> None:
    rules = kinds(rendered["gang-training"], "Role")[0]["rules"]
    assert {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"],
            "verbs": ["create", "get", "list", "delete"]} in rules


def test_scorers_mount_the_dfs_read_only_with_no_api_token(rendered: Any) -> None:
    for name in ("cpu-only", "gpu-scorers", "keda", "planner"):
        for w in [d for d in rendered[name] if d["kind"] in ("Deployment", "StatefulSet")
                  and d["metadata"]["labels"]["app.kubernetes.io/component"] == "scorer"]:
            pod = w["spec"]["template"]["spec"]
            assert pod["automountServiceAccountToken"] is False
            mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
            assert mounts["dfs"]["readOnly"] is True


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
    assert {"name": "HEADRACE_SCORER_RUNTIME", "value": "torch"} in c["env"]  # the group's own
    assert {"name": "HEADRACE_SCORER_PRECISION", "value": "fp16"} in c["env"]
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
    assert {"name": "HEADRACE_SCORER_RUNTIME", "value": "tensorflow"} in c["env"]  # the default
    assert {"name": "HEADRACE_SCORER_PRECISION", "value": "fp32"} in c["env"]
    assert kinds(rendered["cpu-only"], "Role") == []  # local executor: no Job RBAC
    ctl = kinds(rendered["cpu-only"], "Deployment")[0]["spec"]["template"]["spec"]
    assert ctl["automountServiceAccountToken"] is False


def test_keda_scales_consumer_group_scorers_capped_by_partitions(rendered: Any) -> None:
    docs = rendered["keda"]
    caps = {s["metadata"]["name"]: s["spec"]["maxReplicaCount"]
            for s in kinds(docs, "ScaledObject")}
    assert caps == {"hr-headrace-clicks-r1": 4, "hr-headrace-clicks-r2": 2}
    assert all("replicas" not in d["spec"] for d in kinds(docs, "Deployment")
               if d["metadata"]["labels"].get("app.kubernetes.io/component") == "scorer")
    [auth] = kinds(docs, "TriggerAuthentication")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"sasl": ("hr-headrace-kafka", "sasl"), "tls": ("hr-headrace-kafka", "tls"),
                    "username": ("hr-headrace-kafka", "username"),
                    "password": ("hr-headrace-kafka", "password"),
                    "ca": ("kafka-ca", "ca.crt")}
    secret = kinds(docs, "Secret")[0]["stringData"]
    # KEDA's mode names, not librdkafka's.
    assert (secret["sasl"], secret["tls"]) == ("scram_sha512", "enable")
    import json

    cfg = json.loads(secret["config"])
    assert cfg["security.protocol"] == "SASL_SSL"
    assert cfg["ssl.ca.location"] == "/etc/headrace/kafka-tls/ca.crt"
    assert cfg["sasl.mechanism"] == "SCRAM-SHA-512" and "sasl.password" not in cfg
    assert secret["bootstrap"] == "b:9093"


def test_existing_secret_is_used_everywhere_and_nothing_is_created(rendered: Any) -> None:
    docs = rendered["existing-secret"]
    assert kinds(docs, "Secret") == []
    [auth] = kinds(docs, "TriggerAuthentication")
    assert {r["name"] for r in auth["spec"]["secretTargetRef"]} == {"corp-kafka", "corp-ca"}
    for w in [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]:
        pod = w["spec"]["template"]["spec"]
        vol = next(v for v in pod["volumes"] if v["name"] == "kafka-sasl")
        assert vol["secret"]["secretName"] == "corp-kafka"


def test_schedules_render_a_cronjob_firing_each_with_the_triggers_file(rendered: Any) -> None:
    docs = rendered["schedules"]
    [cron] = kinds(docs, "CronJob")  # the one source of a schedule's CronJob
    assert cron["spec"]["schedule"] == "0 2 * * *"
    # The slot is the idempotency key, so a late or repeated run is harmless; Forbid just
    # avoids piling up runs while the broker is down.
    assert {k: cron["spec"][k] for k in ("concurrencyPolicy", "startingDeadlineSeconds",
                                          "successfulJobsHistoryLimit",
                                          "failedJobsHistoryLimit")} == {
        "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 300,
        "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3}
    assert cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 4
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure" and pod["automountServiceAccountToken"] is False
    c = pod["containers"][0]
    assert c["command"] == ["headrace", "schedule", "fire", "nightly"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEADRACE_TRIGGERS"] == "/etc/headrace/triggers/triggers.yaml"
    [cm] = kinds(docs, "ConfigMap")
    assert yaml.safe_load(cm["data"]["triggers.yaml"])["schedules"] == [SCHEDULE]
    ctl = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    cenv = {e["name"]: e.get("value") for e in ctl["env"]}
    assert cenv["HEADRACE_MAX_LAYERS"] == "16" and cenv["HEADRACE_MAX_DATASET_BYTES"] == str(
        10**11)
    # The trainer pods the control plane creates get the same caps.
    import json

    assert json.loads(cenv["HEADRACE_K8S_TRAINER_ENV"])["HEADRACE_MAX_WORKERS"] == "4"


def test_drift_values_set_the_scorers_drift_env_and_drift_rules_reach_the_control_plane(
        rendered: Any, tmp_path: Path) -> None:
    from headrace.trainers.control.triggers import load_triggers

    docs = rendered["drift"]
    scorers = {d["metadata"]["name"]: {e["name"]: e.get("value") for e in d["spec"]["template"][
        "spec"]["containers"][0]["env"]} for d in kinds(docs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "scorer"}
    drift = {name: {k: v for k, v in env.items() if k.startswith("HEADRACE_DRIFT_")}
             for name, env in scorers.items()}
    assert drift == {
        "hr-headrace-clicks-r1": {"HEADRACE_DRIFT_ENABLED": "true",
                                  "HEADRACE_DRIFT_ROWS_PER_BATCH": "1024",
                                  "HEADRACE_DRIFT_WINDOW_RECORDS": "500",
                                  "HEADRACE_DRIFT_WINDOW_SECONDS": "3600",
                                  "HEADRACE_DRIFT_FALSE_ALARM_RATE": "0.01"},
        # Off is said, not left out: the scorer's own default is on.
        "hr-headrace-clicks-off": {"HEADRACE_DRIFT_ENABLED": "false"},
        "hr-headrace-clicks-strict": {"HEADRACE_DRIFT_ENABLED": "true",
                                      "HEADRACE_DRIFT_ROWS_PER_BATCH": "1024",
                                      "HEADRACE_DRIFT_WINDOW_RECORDS": "500",
                                      "HEADRACE_DRIFT_WINDOW_SECONDS": "60",
                                      "HEADRACE_DRIFT_FALSE_ALARM_RATE": "0.001"}}
    # The default values track drift, as the scorer does without the chart.
    default_scorers = [d for d in rendered["cpu-only"] if d["kind"] in ("StatefulSet",
                       "Deployment") and d["metadata"]["labels"][
                       "app.kubernetes.io/component"] == "scorer"]
    assert default_scorers
    for d in default_scorers:
        env = {e["name"]: e.get("value")
               for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["HEADRACE_DRIFT_ENABLED"] == "true"
        assert env["HEADRACE_SCORER_SHADOW_BUDGET_MS"] == "5"
    # The triggers ConfigMap holds the rules as the control plane's own loader reads them.
    [cm] = kinds(docs, "ConfigMap")
    path = tmp_path / "triggers.yaml"
    path.write_text(cm["data"]["triggers.yaml"])
    trig = load_triggers(path)
    assert [(r.name, r.kind) for r in trig.rules] == [("drifted", "drift"), ("fresh", "event")]
    ctl = next(d for d in kinds(docs, "Deployment")
               if d["metadata"]["labels"]["app.kubernetes.io/component"] == "control-plane")
    env = {e["name"]: e.get("value") for e in ctl["spec"]["template"]["spec"]["containers"][0][
        "env"]}
    assert env["HEADRACE_TRIGGERS"] == "/etc/headrace/triggers/triggers.yaml"


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
    {"kafka": {"sasl": {"mechanism": "OAUTHBEARER"}}},
    {"kafka": {"config": {"enable.auto.commit": True}}},  # Headrace's own (clients.RESERVED)
    {"limits": {"maxLayers": 0}},
    {"image": {"digest": "latest"}},
    {"kafka": {"bootstrap": "", "existingSecret": ""}},
    {"dfs": {"root": "relative/path"}},
    {"replicaCount": 3},
    {"scorer": {"decodeProcesses": -1}},
    {"scorer": {"runtime": "mxnet"}},
    {"scorerGroups": [{**GROUP, "runtime": "onnx"}]},
    {"scorer": {"precision": "int8"}},
    {"scorerGroups": [{**GROUP, "precision": "fp8"}]},
    {"networkPolicy": {"dns": {"preset": "coredns"}}},
    {"networkPolicy": {"kafka": {"extraPorts": [70000]}}},
    {"gpuImage": {"repository": "r", "tag": "t", "digest": "latest"}},
    {"scorerGroups": [{**GROUP, "image": {"repo": "x"}}]},
    {"serviceAccount": {"annotations": {"a": 1}}},
    {"imagePullSecrets": [{"secret": "x"}]},
    {"kafka": {"tls": {"clientCertSecret": "user"}}},  # a client certificate needs TLS on
    {"scorer": {"drift": {"falseAlarmRate": 0.9}}},
    {"liveGates": [{"name": "g", "model": "m", "stream": "s", "cron": "hourly"}]},
    {"liveGates": [{"name": "g", "model": "m", "cron": "0 * * * *"}]},
    {"scorer": {"shadow": {"budgetMs": -1}}},
    {"scorer": {"drift": {"windowRecords": 5}}},
    {"scorerGroups": [{**GROUP, "drift": {"enable": True}}]},
    {"controlPlane": {"triggers": {"rules": [{**DRIFT_RULE, "every": 10}]}}},
    {"controlPlane": {"triggers": {"rules": [{**EVENT_RULE, "min_windows": 2}]}}},
    {"controlPlane": {"triggers": {"rules": [{**DRIFT_RULE, "kind": "drfit"}]}}},
    {"controlPlane": {"triggers": {"rules": [{k: v for k, v in DRIFT_RULE.items()
                                              if k != "request"}]}}},
    {"controlPlane": {"triggers": {"schedules": [{**SCHEDULE, "cron": "every day"}]}}},
    {"controlPlane": {"triggers": {"schedules": [{**SCHEDULE, "cron": "0 2 * *"}]}}},
])
def test_values_schema_rejects_bad_values(chart: Any, bad: dict[str, Any]) -> None:
    bad = with_dfs(bad)  # so each case fails for its own reason
    chart.validate_schema(chart.merge_values(with_dfs({})))
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values(bad))
    with pytest.raises(helm.HelmError):
        chart.render(bad, name="hr", namespace="ml")


def test_values_schema_accepts_every_value_set(chart: Any) -> None:
    for values in VALUE_SETS.values():
        chart.validate_schema(chart.merge_values(values))


def test_a_live_gate_is_a_cronjob_promoting_the_streams_candidate_once(rendered: Any) -> None:
    [cron] = [d for d in kinds(rendered["live-gate"], "CronJob")
              if "headrace.io/live-gate" in d["metadata"]["labels"]]
    assert cron["spec"]["schedule"] == "0 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0  # a refused gate is an answer, not a failure to retry
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    [c] = pod["containers"]
    assert c["command"] == ["headrace", "models", "promote", "clicks", "--if-live-gate",
                            "--stream", "clicks"]
    dfs = [m for m in c["volumeMounts"] if m["mountPath"] == "/dfs"]
    assert dfs and not dfs[0].get("readOnly", False)  # the promotion moves the alias
    env = {e["name"] for e in c["env"]}
    assert "HEADRACE_BOOTSTRAP" in env and "HEADRACE_DFS_ROOT" in env


def test_scorer_and_control_plane_probes_use_the_endpoints_that_tell_the_truth(
        rendered: Any) -> None:
    """Liveness and readiness on /livez and /readyz (which fail on a stall, a dead agent, no
    model), a startup probe that lets the first model load, and the stall setting."""
    docs = rendered["cpu-only"]
    [sts] = kinds(docs, "StatefulSet")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    start = c["startupProbe"]
    assert start["httpGet"]["path"] == "/livez"
    assert start["periodSeconds"] * start["failureThreshold"] >= 300
    assert {"name": "HEADRACE_SCORER_STALL_S", "value": "120"} in c["env"]
    ctl = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert ctl["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert ctl["readinessProbe"]["httpGet"]["path"] == "/readyz"
