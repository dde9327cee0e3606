"""Gangs under Kueue on the real control plane: Kueue and JobSet (tools/kueue.py,
tools/jobset.py, built from the module proxy) admit a training gang's Job -- or a
parameter-server gang's JobSet -- whole against its queue's quota, or keep every pod of it from
existing; the executor runs as the chart's control account (rendered with
``trainer.gang: kueue``) and reports Kueue's reason while a gang waits.

The counterpart without a gang scheduler is test_executor_real's
``test_a_gang_that_only_partly_fits_is_bound_in_part_and_not_started``: there three of four
members run and hold their nodes while the fourth waits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.contracts import Framework, Resources
from headrace.trainers.executors.base import JobOutcome, JobSpec
from headrace.trainers.executors.kubernetes import KubeApis, KubernetesExecutor, jobset_installed
from tests.kube import inventory
from tests.kube.conftest import Api, wait_for
from tests.kube.test_executor_real import as_account, control_executor, end_pod
from tools.jobset import JobSet
from tools.kube_cluster import KubeCluster, KubeUnavailable
from tools.kueue import Kueue

pytestmark = pytest.mark.slow

QUEUE = "training"
FLAVOR = "default-flavor"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
# The queue's quota: room for one 2 x 10-core gang at a time, never for 4 x 10 cores.
CPU_QUOTA = 30

Events = list[tuple[str, str, dict[str, Any]]]


@pytest.fixture(scope="module")
def kueue(kube: KubeCluster, api: Api) -> Iterator[Kueue]:
    """JobSet, then Kueue admitting Jobs and JobSets (removed again after the module)."""
    js = JobSet(kube)
    try:
        js.start()
        q = Kueue(kube, jobset=True)
        q.start()
    except KubeUnavailable as exc:
        js.stop()
        pytest.fail(f"cannot start JobSet and Kueue: {exc}")
    api.create(f"{KUEUE_API}/resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR}})
    yield q
    q.stop()
    js.stop()


@pytest.fixture
def queued(tmp_path: Path, kueue: Kueue, api: Api, api_client: Any, namespace: str
           ) -> Iterator[str]:
    """The chart applied with ``trainer.gang: kueue``, and a LocalQueue ``training`` on a
    ClusterQueue of its own with :data:`CPU_QUOTA` cores."""
    from headrace.topology import commands

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(inventory.cluster_file(trainer={
        "workers": 1, "gpusPerWorker": 1, "gpuType": "a100", "gang": "kueue"})))
    commands.run_apply(cluster_path=path, namespace=namespace, api_client=api_client)
    api.create(f"{KUEUE_API}/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": namespace},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": FLAVOR, "resources": [
                {"name": "cpu", "nominalQuota": CPU_QUOTA},
                {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
    api.create(f"{KUEUE_API}/namespaces/{namespace}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": namespace}})
    yield namespace
    api.request("DELETE", f"{KUEUE_API}/clusterqueues/{namespace}")


def kueue_executor(kube: KubeCluster, ns: str, events: Events, *, jobset: bool = False
                   ) -> KubernetesExecutor:
    return control_executor(kube, ns, events, gang="kueue", queue=QUEUE, max_retries=0,
                            jobset=jobset)


def gang(job_id: str, workers: int) -> JobSpec:
    return JobSpec(job_id=job_id, model_name="churn", framework=Framework.TENSORFLOW,
                   resources=Resources(gpus=0, workers=workers, cpu=10, memory_gib=2))


def job_of(api: Api, ns: str, job_id: str) -> dict[str, Any]:
    [job] = [j for j in api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
             if j["metadata"]["annotations"].get("headrace.io/job-id") == job_id]
    return job


def pods_of(api: Api, ns: str, job_id: str) -> list[dict[str, Any]]:
    name = job_of(api, ns, job_id)["metadata"]["labels"]["headrace.io/job"]
    return api.items(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"headrace.io/job={name}")


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["status"].get("phase") == "Running"]


def kinds(events: Events, job_id: str) -> list[str]:
    return [e[0] for e in events if e[2].get("job_id") == job_id]


def test_a_gang_larger_than_its_queues_quota_never_has_a_pod(
        kube: KubeCluster, api: Api, queued: str) -> None:
    """Four workers of 10 cores against a 30-core queue: Kueue admits none of it, so no
    member exists to hold a node (without Kueue three of them would run), the Job stays
    suspended, and the executor reports Kueue's reason instead of calling it started."""
    ns = queued
    events: Events = []
    ex = kueue_executor(kube, ns, events)
    ex.submit(gang("big", workers=4))
    job = job_of(api, ns, "big")
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE

    def reported() -> bool:
        ex.poll()
        return "waiting" in kinds(events, "big")

    wait_for(reported, timeout_s=60, what="the executor to report Kueue's reason")
    reason = next(e[2]["reason"] for e in events if e[0] == "waiting")
    assert reason.startswith("Kueue: ") and "cpu" in reason and "quota" in reason, reason
    [workload] = api.items(f"{KUEUE_API}/namespaces/{ns}/workloads")
    assert [r["name"] for r in workload["metadata"]["ownerReferences"]] == \
        [job["metadata"]["name"]]
    assert workload["spec"]["podSets"][0]["count"] == 4
    for _ in range(3):
        ex.poll()
    assert pods_of(api, ns, "big") == []
    assert job_of(api, ns, "big")["spec"]["suspend"] is True
    assert kinds(events, "big") == ["queued", "waiting"], events
    assert ex.cancel("big")


def test_gangs_are_admitted_whole_one_at_a_time_within_the_quota(
        kube: KubeCluster, api: Api, queued: str) -> None:
    """Two gangs of 2 x 10 cores on a 30-core queue: the first is admitted and both its
    members run; the second has no pod at all until the first ends, then both of its members
    start together."""
    ns = queued
    events: Events = []
    ex = kueue_executor(kube, ns, events)
    ex.submit(gang("first", workers=2))

    def both_running(job_id: str) -> list[dict[str, Any]] | None:
        ex.poll()
        pods = running(pods_of(api, ns, job_id))
        return pods if len(pods) == 2 else None

    first = wait_for(lambda: both_running("first"), timeout_s=90,
                     what="the first gang admitted and both members Running")
    ex.submit(gang("second", workers=2))
    assert job_of(api, ns, "second")["spec"]["suspend"] is True

    def second_waits() -> bool:
        ex.poll()
        assert pods_of(api, ns, "second") == [], "a member of the second gang exists"
        return "waiting" in kinds(events, "second")

    wait_for(second_waits, timeout_s=60, what="the second gang held back by Kueue")
    reason = next(e[2]["reason"] for e in events
                  if e[0] == "waiting" and e[2]["job_id"] == "second")
    assert reason.startswith("Kueue: ") and "cpu" in reason, reason
    assert "started" in kinds(events, "first")
    assert job_of(api, ns, "second")["spec"]["suspend"] is True

    for p in first:
        end_pod(api, ns, p, exit_code=0)
    outcomes: list[JobOutcome] = []

    def first_done_second_running() -> bool:
        outcomes.extend(ex.poll())
        return bool(outcomes) and both_running("second") is not None

    wait_for(first_done_second_running, timeout_s=120,
             what="the first gang complete and the second admitted, both members Running")
    assert [(o.job_id, o.succeeded) for o in outcomes] == [("first", True)]
    assert job_of(api, ns, "second")["spec"]["suspend"] is False
    wait_for(lambda: ex.poll() or "started" in kinds(events, "second"), timeout_s=30,
             what="the executor to call the second gang started")
    assert kinds(events, "first") == ["queued", "started", "succeeded"], events
    assert kinds(events, "second") == ["queued", "waiting", "started"], events
    assert ex.cancel("second")


def test_a_parameter_server_gang_is_one_jobset_admitted_whole(
        kube: KubeCluster, api: Api, queued: str) -> None:
    """MXNet with two workers of 8 cores, a server of 4 and the scheduler: one JobSet (the
    control account finds its CRD), one Workload of three pod sets. The first gang's every
    role runs; an identical second one has no pod (its role Jobs stay suspended) while the first
    holds the quota, and all four of its pods once the first is cancelled."""
    from kubernetes import client

    ns = queued
    control = as_account(kube, ns, "headrace-control")
    assert jobset_installed(KubeApis(batch=None, core=None, namespace=ns,
                                     custom=client.CustomObjectsApi(control)))
    events: Events = []
    ex = kueue_executor(kube, ns, events, jobset=True)

    def ps_gang(job_id: str) -> JobSpec:
        return JobSpec(job_id=job_id, model_name="churn", framework=Framework.MXNET,
                       resources=Resources(workers=2, servers=1, cpu=8, server_cpu=4,
                                           memory_gib=2))

    def jobset_pods(job_id: str) -> list[dict[str, Any]]:
        ex.poll()
        return [p for p in api.items(f"/api/v1/namespaces/{ns}/pods",
                                     labelSelector="app.kubernetes.io/component=trainer")
                if p["metadata"]["annotations"].get("headrace.io/job-id") == job_id
                or p["metadata"]["labels"].get("headrace.io/job", "").endswith(job_id)]

    def roles_running(job_id: str) -> list[str] | None:
        pods = running(jobset_pods(job_id))
        roles = sorted(p["metadata"]["labels"]["headrace.io/role"] for p in pods)
        return roles if len(pods) == 4 else None

    ex.submit(ps_gang("ps-a"))
    [js] = api.items(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    roles = wait_for(lambda: roles_running("ps-a"), timeout_s=120,
                     what="every role of the first gang Running")
    assert roles == ["scheduler", "server", "worker", "worker"]
    [wl] = api.items(f"{KUEUE_API}/namespaces/{ns}/workloads")
    assert sorted((ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]) == \
        [("scheduler", 1), ("server", 1), ("worker", 2)]
    wait_for(lambda: ex.poll() or "started" in kinds(events, "ps-a"), timeout_s=30,
             what="the executor to call the first gang started")

    ex.submit(ps_gang("ps-b"))

    def b_waits() -> bool:
        assert jobset_pods("ps-b") == [], "a member of the second gang exists"
        return "waiting" in kinds(events, "ps-b")

    wait_for(b_waits, timeout_s=60, what="the second gang held back by Kueue")
    # JobSet makes the role Jobs of a suspended JobSet suspended: no pod of any role.
    held = [j for j in api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
            if j["metadata"]["name"].startswith("train-ps-b-")]
    assert sorted(j["metadata"]["name"].split("-")[-2] for j in held) == \
        ["scheduler", "server", "worker"]
    assert all(j["spec"]["suspend"] is True for j in held), held
    assert ex.cancel("ps-a")
    roles = wait_for(lambda: roles_running("ps-b"), timeout_s=120,
                     what="every role of the second gang Running after the first is gone")
    assert roles == ["scheduler", "server", "worker", "worker"]
    assert kinds(events, "ps-b")[:2] == ["queued", "waiting"], events
    assert ex.cancel("ps-b")
