"""Images per role, registry credentials, ServiceAccounts, the mTLS client certificate, object
names that never collide, and the DFS class-or-claim rule."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import helm_python as helm
import pytest
import yaml

from headrace.topology.pod_security import pod_spec_of
from headrace.topology.validation import validate_object
from tests.chart.test_chart import CHART, GROUP, VALUE_SETS, kinds, with_dfs

CPU_GROUP = {**GROUP, "name": "clicks-cpu", "gpu": 0, "partitions": [4, 5]}


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


def render(chart: Any, values: dict[str, Any], release: str = "hr") -> list[dict[str, Any]]:
    docs = chart.render(with_dfs(values), name=release, namespace="ml")
    out = [d for path, text in sorted(docs.items()) if path.endswith(".yaml")
           for d in yaml.safe_load_all(text) if d]
    for d in out:
        validate_object(d)
    return out


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: spec for d in docs if (spec := pod_spec_of(d)) is not None}


def scorer(docs: list[dict[str, Any]], group: str) -> dict[str, Any]:
    spec = pods(docs)[f"hr-headrace-{group}"]
    return spec


def test_gpu_groups_run_the_gpu_image_and_cpu_pods_the_cpu_image(chart: Any) -> None:
    docs = render(chart, {"scorerGroups": [GROUP, CPU_GROUP],
                          "image": {"tag": "2.0"}, "gpuImage": {"tag": "2.0-gpu"}})
    assert scorer(docs, "clicks-r1")["containers"][0]["image"] == (
        "ghcr.io/headrace/headrace:2.0-gpu")
    assert scorer(docs, "clicks-cpu")["containers"][0]["image"] == "ghcr.io/headrace/headrace:2.0"
    ctl = pods(docs)["hr-headrace-control"]["containers"][0]
    assert ctl["image"] == "ghcr.io/headrace/headrace:2.0"
    env = {e["name"]: e.get("value") for e in ctl["env"]}
    assert env["HEADRACE_K8S_IMAGE"] == "ghcr.io/headrace/headrace:2.0"


def test_a_group_image_overrides_the_role_image_and_a_digest_pins_it(chart: Any) -> None:
    digest = "sha256:" + "b" * 64
    docs = render(chart, {"scorerGroups": [
        {**GROUP, "image": {"repository": "reg.corp/headrace-cu118", "digest": digest}},
        {**CPU_GROUP, "image": {"tag": "canary"}}]})
    assert scorer(docs, "clicks-r1")["containers"][0]["image"] == (
        f"reg.corp/headrace-cu118@{digest}")
    assert scorer(docs, "clicks-cpu")["containers"][0]["image"] == (
        "ghcr.io/headrace/headrace:canary")


def test_image_pull_secrets_reach_every_pod_and_every_service_account(chart: Any) -> None:
    docs = VALUE_SETS["msk-nodelocal"]
    rendered = render(chart, docs)
    want = [{"name": "regcred"}, {"name": "mirror"}]
    specs = pods(rendered)
    assert len(specs) == 4  # control plane, two scorer groups, the schedule's CronJob
    for name, spec in specs.items():
        assert spec["imagePullSecrets"] == want, name
    accounts = kinds(rendered, "ServiceAccount")
    assert {a["metadata"]["name"] for a in accounts} == {
        "hr-headrace-control", "hr-headrace-trainer", "hr-headrace-scorer"}
    # The training pods the executor starts under the trainer account inherit them from it.
    for a in accounts:
        assert a["imagePullSecrets"] == want
    assert all("imagePullSecrets" not in p for p in pods(render(chart, {})).values())


def test_service_account_annotations_for_irsa_and_workload_identity(chart: Any) -> None:
    accounts = {a["metadata"]["name"]: a for a in kinds(render(chart, VALUE_SETS[
        "msk-nodelocal"]), "ServiceAccount")}
    arn = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/hr"}
    assert accounts["hr-headrace-scorer"]["metadata"]["annotations"] == arn
    assert accounts["hr-headrace-trainer"]["metadata"]["annotations"] == arn
    assert accounts["hr-headrace-control"]["metadata"]["annotations"] == {**arn,
                                                                         "owner": "ml-platform"}
    gke = render(chart, {"serviceAccount": {"roleAnnotations": {"trainer": {
        "iam.gke.io/gcp-service-account": "trainer@p.iam.gserviceaccount.com"}}}})
    by_name = {a["metadata"]["name"]: a["metadata"].get("annotations")
               for a in kinds(gke, "ServiceAccount")}
    assert by_name == {"hr-headrace-control": None, "hr-headrace-trainer": {
        "iam.gke.io/gcp-service-account": "trainer@p.iam.gserviceaccount.com"}}


def test_existing_service_accounts_are_used_and_none_created(chart: Any) -> None:
    docs = render(chart, VALUE_SETS["existing-service-accounts"])
    assert kinds(docs, "ServiceAccount") == []
    specs = pods(docs)
    assert specs["hr-headrace-control"]["serviceAccountName"] == "corp-control"
    assert scorer(docs, "clicks-r1")["serviceAccountName"] == "corp-scorer"
    ctl_env = {e["name"]: e.get("value")
               for e in specs["hr-headrace-control"]["containers"][0]["env"]}
    assert ctl_env["HEADRACE_K8S_SERVICE_ACCOUNT"] == "corp-trainer"
    [binding] = kinds(docs, "RoleBinding")
    assert binding["subjects"][0]["name"] == "corp-control"


def test_mtls_client_certificate_is_mounted_for_every_kafka_client(chart: Any) -> None:
    docs = render(chart, VALUE_SETS["strimzi-mtls-openshift"])
    cfg = json.loads(kinds(docs, "Secret")[0]["stringData"]["config"])
    assert cfg["security.protocol"] == "SSL"
    assert cfg["ssl.ca.location"] == "/etc/headrace/kafka-tls/ca.crt"
    assert cfg["ssl.certificate.location"] == "/etc/headrace/kafka-client/user.crt"
    assert cfg["ssl.key.location"] == "/etc/headrace/kafka-client/user.key"
    specs = pods(docs)
    assert len(specs) == 3  # control plane, scorers, the schedule's CronJob
    for name, spec in specs.items():
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["kafka-client-cert"]["secret"] == {
            "secretName": "headrace-user", "defaultMode": 0o440,
            "items": [{"key": "user.crt", "path": "user.crt"},
                      {"key": "user.key", "path": "user.key"}]}, name
        assert vols["kafka-tls"]["secret"]["secretName"] == "my-cluster-cluster-ca-cert"
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["kafka-client-cert"] == {"name": "kafka-client-cert", "readOnly": True,
                                               "mountPath": "/etc/headrace/kafka-client"}
    [auth] = kinds(docs, "TriggerAuthentication")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs["cert"] == ("headrace-user", "user.crt")
    assert refs["key"] == ("headrace-user", "user.key")
    assert refs["ca"] == ("my-cluster-cluster-ca-cert", "ca.crt")


LONG_A = "payments-fraud-scoring-production-eu-west-1-blue"
LONG_B = "payments-fraud-scoring-production-eu-west-1-green"


def _names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def test_two_long_release_names_in_one_namespace_share_no_object_name(chart: Any) -> None:
    values = {**VALUE_SETS["msk-nodelocal"], "keda": {"enabled": True},
              "serviceMonitor": {"enabled": True},
              "scorerGroups": [{**GROUP, "name": "clicks-long-locality-group-r1"},
                               {**CPU_GROUP, "name": "clicks-long-locality-group-r2"}]}
    a, b = render(chart, values, LONG_A), render(chart, values, LONG_B)
    assert len(a) == len(b) >= 15
    assert {n for _, n in _names(a)} & {n for _, n in _names(b)} == set()
    for release, docs in ((LONG_A, a), (LONG_B, b)):
        mark = hashlib.sha256(f"{release}-headrace".encode()).hexdigest()[:8]
        for d in docs:
            name = d["metadata"]["name"]
            assert len(name) <= 52, name  # a StatefulSet's pods add a 10-char revision hash
            # cut, marked with the hash of the whole release name, readable suffix kept
            assert name.startswith("payments-fra") and f"-{mark}-" in name, name
    mark_a = hashlib.sha256(f"{LONG_A}-headrace".encode()).hexdigest()[:8]
    assert ("Deployment", f"{LONG_A[:35]}-{mark_a}-control") in _names(a)
    # Distinct groups of one long release stay distinct too.
    sts = [d["metadata"]["name"] for d in a if d["kind"] in ("StatefulSet", "Deployment")]
    assert len(set(sts)) == len(sts) == 3


def test_short_names_are_unchanged(chart: Any) -> None:
    names = {n for _, n in _names(render(chart, {"scorerGroups": [GROUP]}))}
    assert {"hr-headrace-control", "hr-headrace-clicks-r1", "hr-headrace-kafka",
            "hr-headrace-dfs", "hr-headrace-scorer"} <= names
    assert {n for _, n in _names(render(chart, {}, "headrace"))} >= {"headrace-control"}


@pytest.mark.parametrize("dfs", [{}, {"storageClassName": ""}, {"size": "1Ti"}])
def test_the_dfs_needs_a_storage_class_or_an_existing_claim(chart: Any,
                                                           dfs: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError, match=r"storageClassName|existingClaim"):
        chart.validate_schema(chart.merge_values({"dfs": dfs}))
    for ok in ({"storageClassName": "cephfs"}, {"existingClaim": "shared"}):
        chart.validate_schema(chart.merge_values({"dfs": {**dfs, **ok}}))
    pvc = kinds(render(chart, {"dfs": {"storageClassName": "cephfs"}}), "PersistentVolumeClaim")
    assert pvc[0]["spec"]["storageClassName"] == "cephfs"
