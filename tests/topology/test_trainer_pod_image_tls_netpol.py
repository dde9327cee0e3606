"""Training pods the executor builds: the CUDA image only on roles that request GPUs, the
mTLS client certificate mounted where the chart's librdkafka config points, and one
NetworkPolicy per gang attempt opening its pods to its own job only (validated strictly with
the official schemas; every pod meets the restricted Pod Security profile)."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.topology.pod_security import manifest_violations
from headrace.topology.training import TrainingJobSpec, training_objects
from headrace.topology.validation import validate_all
from headrace.trainers.executors.kubernetes_security import KAFKA_CLIENT_DIR
from tests.topology.test_distributed_pods import jobs_of


def _objects(**kw: Any) -> list[dict[str, Any]]:
    spec = TrainingJobSpec(job_id="job-x", model_name="m", image="cpu:1", **kw)
    objs = validate_all(training_objects(spec, owner_uid="u-1"))
    for o in objs:
        assert manifest_violations(o) == [], o["kind"]
    return objs


def _container(job: dict[str, Any]) -> dict[str, Any]:
    [c] = job["spec"]["template"]["spec"]["containers"]
    return c


def test_gpu_roles_get_the_gpu_image_and_cpu_roles_keep_the_cpu_image() -> None:
    objs = _objects(framework="mxnet", workers=2, servers=1, gpus_per_worker=1,
                    gpu_image="gpu:1")
    images = {role: _container(j)["image"] for role, j in jobs_of(objs).items()}
    assert images == {"worker": "gpu:1", "server": "cpu:1", "scheduler": "cpu:1"}
    # A server that asks for a GPU gets it too; a CPU-only single pod keeps the CPU image.
    objs = _objects(framework="mxnet", workers=2, servers=1, server_gpus=1, gpu_image="gpu:1")
    assert _container(jobs_of(objs)["server"])["image"] == "gpu:1"
    [single] = _objects(framework="tensorflow", gpus_per_worker=0, gpu_image="gpu:1")
    assert _container(single)["image"] == "cpu:1"
    [no_gpu_image] = _objects(framework="tensorflow", gpus_per_worker=1)
    assert _container(no_gpu_image)["image"] == "cpu:1"


@pytest.mark.parametrize("workers", [1, 2])
def test_the_client_certificate_secret_is_mounted_read_only_with_its_two_keys(
        workers: int) -> None:
    objs = _objects(framework="tensorflow", workers=workers,
                    kafka_client_cert_secret="kafka-user")
    for job in (o for o in objs if o["kind"] == "Job"):
        pod = job["spec"]["template"]["spec"]
        [vol] = [v for v in pod["volumes"] if v["name"] == "kafka-client-cert"]
        assert vol["secret"]["secretName"] == "kafka-user"
        assert vol["secret"]["defaultMode"] == 0o440
        assert vol["secret"]["items"] == [{"key": "user.crt", "path": "user.crt"},
                                          {"key": "user.key", "path": "user.key"}]
        [mount] = [m for m in _container(job)["volumeMounts"]
                   if m["name"] == "kafka-client-cert"]
        assert mount == {"name": "kafka-client-cert", "mountPath": KAFKA_CLIENT_DIR,
                         "readOnly": True}
    # The chart's librdkafka paths (ssl.certificate.location / ssl.key.location).
    assert KAFKA_CLIENT_DIR == "/etc/headrace/kafka-client"
    [plain] = _objects(framework="tensorflow")
    volumes = plain["spec"]["template"]["spec"]["volumes"]
    assert all(v["name"] != "kafka-client-cert" for v in volumes)


@pytest.mark.parametrize("jobset", [False, True])
def test_a_gang_attempt_has_one_network_policy_for_its_own_job(jobset: bool) -> None:
    objs = _objects(framework="mxnet", workers=2, servers=1, jobset=jobset, attempt=2)
    [pol] = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert pol["metadata"]["name"] == "train-job-x-a2"
    [ref] = pol["metadata"]["ownerReferences"]  # deleting the attempt deletes it
    assert ref["uid"] == "u-1" and ref["kind"] == ("JobSet" if jobset else "Job")
    spec = pol["spec"]
    assert spec["policyTypes"] == ["Ingress"]  # egress stays the chart's
    selected = spec["podSelector"]["matchLabels"]
    assert selected == {"headrace.io/job": "train-job-x", "headrace.io/attempt": "2",
                        "app.kubernetes.io/component": "trainer"}
    [rule] = spec["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {
        "headrace.io/job": "train-job-x", "app.kubernetes.io/component": "trainer"}}}]
    assert rule["ports"] == [{"port": 9091, "protocol": "TCP"},
                             {"port": 32768, "endPort": 60999, "protocol": "TCP"}]
    # It selects every pod of the attempt, each role's.
    for job in jobs_of(objs).values():
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert selected.items() <= labels.items()


def test_an_allreduce_gang_opens_tf_configs_port_and_a_single_pod_gets_no_policy() -> None:
    objs = _objects(framework="tensorflow", workers=3)
    [pol] = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert pol["spec"]["ingress"][0]["ports"] == [{"port": 2222, "protocol": "TCP"}]
    assert [o["kind"] for o in _objects(framework="tensorflow")] == ["Job"]
