"""The Kubernetes executor and the chart's RBAC against a real control plane (tests/real_kube.py):
the executor runs as the chart's control-plane ServiceAccount (impersonated), the Job
controller makes the pods, the scheduler binds them to a GPU node of the asked type, kwok runs
them, and the test decides how each pod ends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import (
    CancelRequested,
    Framework,
    JobEvent,
    JobEventKind,
    JobState,
    Resources,
    TrainRequested,
)
from headrace.core.errors import RecordRef
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.topology import kube_access
from headrace.trainers import jobs
from headrace.trainers.control.plane import ControlPlane
from headrace.trainers.executors.base import JobOutcome, JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig
from tests.kube import inventory
from tests.kube.conftest import Api, wait_for
from tests.trainers.conftest import request
from tools.kube_cluster import KubeCluster

pytestmark = pytest.mark.slow

IMAGE = "registry.example/headrace:0.1.0"


def as_account(kube: KubeCluster, namespace: str, account: str) -> Any:
    """An ``ApiClient`` acting as ``namespace``'s ServiceAccount ``account`` (impersonation:
    the server authorises every request as that account would be)."""
    client = kube_access.api_client(environ={"KUBECONFIG": str(kube.kubeconfig)})
    client.set_default_header("Impersonate-User",
                              f"system:serviceaccount:{namespace}:{account}")
    client.set_default_header("Impersonate-Group", "system:serviceaccounts")
    return client


def control_executor(kube: KubeCluster, ns: str, events: list[tuple[str, str, dict[str, Any]]],
                     *, waiting_check_s: float = 5.0, also: Callable[..., None] | None = None,
                     **config: Any) -> KubernetesExecutor:
    """The executor as the control plane runs it: acting as the chart's ``headrace-control``
    account, each event it reports appended to ``events`` (and passed to ``also``)."""
    from kubernetes import client

    def on_event(kind: str, message: str, **fields: Any) -> None:
        events.append((kind, message, fields))
        if also is not None:
            also(kind, message, **fields)

    control = as_account(kube, ns, "headrace-control")
    return KubernetesExecutor(
        config=KubernetesExecutorConfig(image=IMAGE, gpu_image=f"{IMAGE}-gpu", namespace=ns,
                                        **{"gang": "none", **config}),
        batch_api=client.BatchV1Api(control), core_api=client.CoreV1Api(control),
        custom_api=client.CustomObjectsApi(control),
        networking_api=client.NetworkingV1Api(control),
        on_event=on_event, backoff_s=0,
        waiting_check_s=waiting_check_s)


def can(api: Api, verb: str, resource: str, ns: str, *, group: str = "",
        sub: str = "") -> bool:
    """SelfSubjectAccessReview as whoever ``api`` acts as."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "group": group,
                                              "resource": resource, "subresource": sub}}}
    status, data = api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                               review)
    assert status == 201, data
    return bool(data["status"].get("allowed"))


# What the executor does (kubernetes.py) and the chart's control Role must allow.
CONTROL_NEEDS = [("create", "jobs", "batch", ""), ("get", "jobs", "batch", ""),
                 ("list", "jobs", "batch", ""), ("watch", "jobs", "batch", ""),
                 ("patch", "jobs", "batch", ""), ("delete", "jobs", "batch", ""),
                 ("list", "pods", "", ""), ("watch", "pods", "", ""), ("get", "pods", "", "log"),
                 ("create", "services", "", ""), ("delete", "services", "", ""),
                 ("create", "networkpolicies", "networking.k8s.io", ""),
                 ("delete", "networkpolicies", "networking.k8s.io", ""),
                 ("list", "jobsets", "jobset.x-k8s.io", "")]
# What no Headrace identity may do in its namespace.
NOBODY = [("create", "pods", "", ""), ("delete", "pods", "", ""), ("get", "secrets", "", ""),
          ("list", "secrets", "", ""), ("create", "roles", "rbac.authorization.k8s.io", ""),
          ("create", "rolebindings", "rbac.authorization.k8s.io", ""),
          ("create", "pods", "", "exec"), ("patch", "statefulsets", "apps", ""),
          ("create", "serviceaccounts", "", "token")]


def test_the_charts_accounts_can_do_what_they_need_and_nothing_more(
        kube: KubeCluster, applied: str) -> None:
    ns = applied
    control = Api(as_account(kube, ns, "headrace-control"))
    for verb, res, group, sub in CONTROL_NEEDS:
        assert can(control, verb, res, ns, group=group, sub=sub), (verb, res, sub)
    for account in ("headrace-control", "headrace-scorer", "headrace-trainer"):
        who = Api(as_account(kube, ns, account))
        for verb, res, group, sub in NOBODY:
            assert not can(who, verb, res, ns, group=group, sub=sub), (account, verb, res, sub)
    for account in ("headrace-scorer", "headrace-trainer"):  # no API access at all
        who = Api(as_account(kube, ns, account))
        for verb, res, group, _ in CONTROL_NEEDS:
            assert not can(who, verb, res, ns, group=group), (account, verb, res)
    # The refusals are the server's, on real requests too: a 403, not an empty answer.
    status, _ = control.request("GET", f"/api/v1/namespaces/{ns}/secrets")
    assert status == 403
    status, _ = control.request("GET", "/api/v1/nodes")
    assert status == 403
    status, _ = Api(as_account(kube, ns, "headrace-scorer")).request(
        "GET", f"/api/v1/namespaces/{ns}/pods")
    assert status == 403


def trainer_pods(api: Api, ns: str) -> list[dict[str, Any]]:
    return api.items(f"/api/v1/namespaces/{ns}/pods",
                     labelSelector="app.kubernetes.io/component=trainer")


def end_pod(api: Api, ns: str, pod: dict[str, Any], exit_code: int) -> None:
    """What the kubelet would report when the pod's container exits with ``exit_code``."""
    name = pod["metadata"]["name"]
    terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                  "startedAt": pod["status"].get("startTime"),
                  "finishedAt": pod["status"].get("startTime")}
    api.patch_status(f"/api/v1/namespaces/{ns}/pods/{name}", {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": c["name"], "image": c["image"], "ready": False,
                               "restartCount": 0, "imageID": "", "started": False,
                               "state": {"terminated": terminated}}
                              for c in pod["spec"]["containers"]]})


def running_pod(api: Api, ns: str, *, other_than: frozenset[str] = frozenset()
                ) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for p in trainer_pods(api, ns):
            if p["metadata"]["name"] not in other_than and \
                    p.get("status", {}).get("phase") == "Running":
                return p
        return None

    got: dict[str, Any] = wait_for(find, timeout_s=180,
                                   what="a trainer pod scheduled and Running (kwok)")
    return got


def test_a_training_job_runs_retries_and_completes_under_the_control_account(
        kube: KubeCluster, api: Api, applied: str) -> None:
    ns = applied
    events: list[tuple[str, str, dict[str, Any]]] = []
    def executor(events: list[tuple[str, str, dict[str, Any]]]) -> KubernetesExecutor:
        return control_executor(kube, ns, events, gpu_type="a100", max_retries=2)

    ex = executor(events)
    job = JobSpec(job_id="churn-1", model_name="churn", framework=Framework.TENSORFLOW,
                  resources=Resources(gpus=1, workers=1, cpu=1, memory_gib=2))
    ex.submit(job)
    assert [e[0] for e in events] == ["queued"]
    # A second executor (a restarted control plane) submitting the same job: the server's 409.
    other: list[tuple[str, str, dict[str, Any]]] = []
    executor(other).submit(job)
    assert [e[0] for e in other][:1] == ["duplicate"]

    first = running_pod(api, ns)
    node = next(n for n in inventory.NODES if n["name"] == first["spec"]["nodeName"])
    assert node.get("gpuType") == "a100", node  # the scheduler read the GPU request and type
    wait_for(lambda: ex.poll() or "started" in [e[0] for e in events], timeout_s=30,
             what="the executor to see the job running")
    # `jobs logs` on a running job: its pod's log through the API server (kwok serves it).
    kube.write_pod_log(["epoch 1 loss 0.693", "epoch 2 loss 0.412"])
    assert ex.logs("churn-1") == ["epoch 1 loss 0.693", "epoch 2 loss 0.412"]

    end_pod(api, ns, first, exit_code=1)  # the worker crashes: the Job controller retries it
    second = running_pod(api, ns, other_than=frozenset({first["metadata"]["name"]}))
    wait_for(lambda: ex.poll() or "retrying" in [e[0] for e in events], timeout_s=30,
             what="the executor to report the retry")

    end_pod(api, ns, second, exit_code=0)
    outcomes: list[JobOutcome] = []

    def ended() -> list[JobOutcome]:
        outcomes.extend(ex.poll())
        return outcomes

    wait_for(ended, timeout_s=60,
             what="the Job controller to complete the Job and the executor to see it")
    [outcome] = outcomes
    assert (outcome.job_id, outcome.succeeded, outcome.attempts) == ("churn-1", True, 2)
    assert [e[0] for e in events] == ["queued", "started", "retrying", "succeeded"]
    name = first["metadata"]["labels"]["job-name"]
    job_obj = api.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
    assert job_obj["status"]["succeeded"] == 1 and job_obj["status"]["failed"] == 1


def test_an_all_reduce_gang_is_admitted_and_runs_under_the_control_account(
        kube: KubeCluster, api: Api, applied: str) -> None:
    """Two GPU workers: the owner Job (created suspended), its headless Service and its
    NetworkPolicy are admitted as the control account, the Job is let go, and both workers are
    bound to GPU nodes and run; the gang ends when both end."""
    ns = applied
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = control_executor(kube, ns, events, gpu_type="a100", max_retries=1)
    ex.submit(JobSpec(job_id="gang-1", model_name="churn", framework=Framework.TENSORFLOW,
                      resources=Resources(gpus=1, workers=2, cpu=1, memory_gib=2)))
    assert [e[0] for e in events] == ["queued"], events
    [job] = api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
    assert job["spec"].get("suspend") is False
    owner_uid = job["metadata"]["uid"]
    [svc] = api.items(f"/api/v1/namespaces/{ns}/services",
                      labelSelector="app.kubernetes.io/component=trainer")
    assert svc["spec"]["clusterIP"] == "None"
    [pol] = api.items(f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies")
    for obj in (svc, pol):
        assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [owner_uid]

    def both_running() -> list[dict[str, Any]] | None:
        pods = [p for p in trainer_pods(api, ns) if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 2 else None

    pods = wait_for(both_running, timeout_s=60, what="both gang workers Running")
    gpu_nodes = {n["name"] for n in inventory.NODES if n.get("gpuType") == "a100"}
    assert {p["spec"]["nodeName"] for p in pods} <= gpu_nodes
    for p in pods:
        end_pod(api, ns, p, exit_code=0)
    outcomes: list[JobOutcome] = []

    def ended() -> list[JobOutcome]:
        outcomes.extend(ex.poll())
        return outcomes

    wait_for(ended, timeout_s=60, what="the gang's Job to complete")
    assert [(o.job_id, o.succeeded) for o in outcomes] == [("gang-1", True)]


def test_a_job_waiting_for_gpus_is_not_started(kube: KubeCluster, api: Api, applied: str
                                               ) -> None:
    """D50: the Job controller counts a Pending pod as ``active``; the executor reported such a
    job "started ... running" (and began its startup watchdog) while the scheduler had no node
    for it. Four T4s: no node has them."""
    ns = applied
    events: list[tuple[str, str, dict[str, Any]]] = []
    # Pods read on every poll: the first read may come before the scheduler's verdict, and
    # the default 5 s between reads would hide the report from the polls below.
    ex = control_executor(kube, ns, events, gpu_type="t4", waiting_check_s=0)
    ex.submit(JobSpec(job_id="big-1", model_name="churn", framework=Framework.TENSORFLOW,
                      resources=Resources(gpus=4, workers=1, cpu=1, memory_gib=2)))

    def pending_and_counted_active() -> bool:
        ex.poll()
        [job] = api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
        pods = trainer_pods(api, ns)
        return bool(job.get("status", {}).get("active") == 1 and pods and any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in pods[0]["status"].get("conditions", [])))

    wait_for(pending_and_counted_active, timeout_s=60,
             what="the pod refused by the scheduler and counted active by the Job controller")

    def reported() -> bool:  # the executor's watch of the Job may lag the API server
        ex.poll()
        return any(e[0] != "queued" for e in events)

    wait_for(reported, timeout_s=30, what="the executor to report the job")
    for _ in range(3):
        ex.poll()
    # Not started; the scheduler's reason reported (once) instead.
    assert [e[0] for e in events] == ["queued", "waiting"], events
    reason = events[1][2]["reason"]
    assert reason.startswith("Unschedulable: 0/6 nodes are available") and \
        "Insufficient nvidia.com/gpu" in reason, reason
    assert ex.cancel("big-1")


def test_a_restarted_control_plane_adopts_the_running_job_and_sees_it_end(
        kube: KubeCluster, api: Api, applied: str) -> None:
    """The control plane dies (its executor is gone) while the Job runs; the next one adopts the
    recorded attempt instead of creating another, and reports the Job's end."""
    ns = applied

    def executor(events: list[tuple[str, str, dict[str, Any]]]) -> KubernetesExecutor:
        return control_executor(kube, ns, events, gpu_type="a100")

    job = JobSpec(job_id="adopt-1", model_name="churn", framework=Framework.TENSORFLOW,
                  resources=Resources(gpus=1, workers=1, cpu=1, memory_gib=2))
    first: list[tuple[str, str, dict[str, Any]]] = []
    dead = executor(first)
    dead.submit(job)
    handle = dead.handle("adopt-1")
    assert handle is not None
    pod = running_pod(api, ns)
    del dead  # the control plane is gone; the Job runs on

    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = executor(events)
    assert ex.adopt(job, handle)
    end_pod(api, ns, pod, exit_code=0)
    outcomes: list[JobOutcome] = []

    def ended() -> list[JobOutcome]:
        outcomes.extend(ex.poll())
        return outcomes

    wait_for(ended, timeout_s=60, what="the adopted Job to complete")
    assert [(o.job_id, o.succeeded) for o in outcomes] == [("adopt-1", True)]
    assert len(api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")) == 1  # no second attempt
    assert "queued" not in [e[0] for e in events]


def test_a_job_past_its_deadline_is_failed_by_the_job_controller(
        kube: KubeCluster, api: Api, applied: str) -> None:
    """``active_deadline_s`` becomes the Job's activeDeadlineSeconds: the Job controller kills
    the running pod and fails the Job (DeadlineExceeded), and the executor reports that."""
    ns = applied
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = control_executor(kube, ns, events, gpu_type="a100", active_deadline_s=3)
    ex.submit(JobSpec(job_id="slow-1", model_name="churn", framework=Framework.TENSORFLOW,
                      resources=Resources(gpus=1, workers=1, cpu=1, memory_gib=2)))
    # No wait for the pod to be Running: on a loaded machine the 3 s deadline may pass first,
    # and the Job controller then deletes the pod before a poll sees it.
    outcomes: list[JobOutcome] = []

    def ended() -> list[JobOutcome]:
        outcomes.extend(ex.poll())
        return outcomes

    wait_for(ended, timeout_s=180, what="the Job controller to fail the Job at its deadline")
    [outcome] = outcomes
    assert not outcome.succeeded and "DeadlineExceeded" in (outcome.reason or ""), outcome
    assert events[-1][0] == "failed"


def test_a_gang_that_only_partly_fits_is_bound_in_part_and_not_started(
        kube: KubeCluster, api: Api, applied: str) -> None:
    """No gang scheduler installed: the real scheduler binds each member where it fits. Four
    CPU workers of 10 cores; three CPU nodes of 16 (the GPU nodes' taint keeps them off): three
    run, one stays Pending. The executor does not call the gang started (its members wait for
    each other) and reports the scheduler's reason for the fourth."""
    ns = applied
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = control_executor(kube, ns, events)
    ex.submit(JobSpec(job_id="gang-4", model_name="churn", framework=Framework.TENSORFLOW,
                      resources=Resources(gpus=0, workers=4, cpu=10, memory_gib=2)))

    def split() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        ex.poll()
        pods = trainer_pods(api, ns)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        refused = [p for p in pods if not p["spec"].get("nodeName") and any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in p["status"].get("conditions", []))]
        return (running, refused) if len(running) == 3 and len(refused) == 1 else None

    running, _ = wait_for(split, timeout_s=120, what="three workers Running, one refused")
    assert {p["spec"]["nodeName"] for p in running} == {"cpu-c1", "cpu-c2", "cpu-c3"}
    wait_for(lambda: ex.poll() or "waiting" in [e[0] for e in events], timeout_s=30,
             what="the executor to report why the fourth waits")
    assert [e[0] for e in events] == ["queued", "waiting"], events
    assert "Insufficient cpu" in events[1][2]["reason"], events[1]
    assert ex.cancel("gang-4")


def _record(topics: ControlTopics, event: TrainRequested | CancelRequested) -> RecordRef:
    """``event`` as the control plane's request topic delivers it."""
    key = event.job_id if isinstance(event, CancelRequested) else event.idempotency_key
    return RecordRef(topic=topics.train_requests, partition=0, offset=0, key=key.encode(),
                     value=event.to_bytes(),
                     headers=tuple(hdr.contract_headers(event.SCHEMA, event.schema_version)))


def test_a_cancelled_job_is_deleted_with_its_pods_and_ends_cancelled_once(
        kube: KubeCluster, api: Api, applied: str, conn: KafkaConnection, dfs: Path, demo: str,
        topics: ControlTopics) -> None:
    """``headrace jobs cancel`` on Kubernetes: the control plane, on the ``CancelRequested``,
    calls ``executor.cancel``, which deletes the attempt's Job (Foreground: the garbage
    collector deletes its pods first); the job ends CANCELLED once, with who asked and why,
    and the executor reports no end of its own afterwards."""
    ns = applied
    events: list[tuple[str, str, dict[str, Any]]] = []
    planes: list[ControlPlane] = []
    ex = control_executor(kube, ns, events, gpu_type="a100",
                          also=lambda kind, message, **f: planes[0].on_executor_event(
                              kind, message, **f))
    plane = ControlPlane(root=dfs, conn=conn, executor=ex, topics=topics)
    planes.append(plane)
    table: dict[str, Any] = {}
    train = request(demo, key="kube-cancel", framework="tensorflow").model_copy(
        update={"resources": Resources(gpus=1, workers=1, cpu=1, memory_gib=2)})
    jid = jobs.job_id_for("kube-cancel")
    try:
        plane.on_request(_record(topics, train), table)
        assert ex.active() == [jid]
        pod = running_pod(api, ns)
        [job_obj] = api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
        assert pod["metadata"]["labels"]["job-name"] == job_obj["metadata"]["name"]
        wait_for(lambda: plane.on_tick(table) or "started" in [e[0] for e in events],
                 timeout_s=30, what="the executor to see the job running")
        st = jobs.read_status(dfs, jid)
        assert st is not None and st.state == JobState.RUNNING, st

        plane.on_request(_record(topics, CancelRequested(
            job_id=jid, requested_by="alice", reason="wrong dataset")), table)
        # The garbage collector's Foreground deletion took 16 s alone and 37 s after the
        # file's other tests on this (loaded) machine: room to spare.
        wait_for(lambda: not api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
                 and not trainer_pods(api, ns), timeout_s=120,
                 what="the cancelled Job and its pods deleted")
        for _ in range(3):  # nothing of the deleted Job comes back as an end of its own
            plane.on_tick(table)
        assert ex.poll() == [] and jid not in ex.active()
        assert not ex.cancel(jid)  # nothing left to stop
    finally:
        plane.close()
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == JobState.CANCELLED, st
    assert st.reason == "cancelled by alice: wrong dataset" and st.version is None
    assert table[jid]["state"] == JobState.CANCELLED.value
    mine = [e for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
            if e.job_id == jid and e.kind != JobEventKind.LOG]
    assert [e.kind for e in mine] == [JobEventKind.QUEUED, JobEventKind.STARTED,
                                      JobEventKind.CANCELLED], mine
    assert mine[-1].reason == "cancelled by alice: wrong dataset"
