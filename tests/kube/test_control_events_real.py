"""``headrace control`` with the Kubernetes executor, acting as the chart's ``headrace-control``
ServiceAccount (a token the real API server issued), on a real broker: what it publishes on
``events.jobs`` is what the API server, the scheduler and the Job controller report -- the
Job created (QUEUED), a pod the scheduler cannot place (QUEUED again, with the scheduler's
reason), a pod bound and running (STARTED, naming the node), a pod failure retried by the Job
controller (RETRYING), and the Job failed at its backoff limit (FAILED, with the reason); its
pods' logs, read through the API server from kwok, are what ``headrace jobs logs`` prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobEvent, JobEventKind, Resources, TrainRequested
from headrace.contracts.training import ModelSpec
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from tests.kube import inventory
from tests.kube.conftest import Api, wait_for
from tests.kube.test_executor_real import end_pod, trainer_pods
from tests.trainers.conftest import REPO, job_env, stop, wait_events
from tools.kube_cluster import KubeCluster

pytestmark = pytest.mark.slow

IMAGE = "registry.example/headrace:0.1.0"
PRINTED = ["epoch 1 loss 0.693", "MemoryError: out of memory"]


def account_kubeconfig(kube: KubeCluster, api: Api, ns: str, account: str,
                       path: Path) -> Path:
    """A kubeconfig with a token the API server issues for the ServiceAccount (TokenRequest),
    as the pod's projected token would be."""
    status, data = api.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    assert status == 201, data
    kube.write_kubeconfig(path, data["status"]["token"])
    return path


def train(demo: str, key: str, gpus: int) -> TrainRequested:
    return TrainRequested(idempotency_key=key, model_name="churn", framework="tensorflow",
                          dataset_uri=demo, resources=Resources(gpus=gpus, cpu=1, memory_gib=2),
                          spec=ModelSpec(epochs=1, hidden=(8,), batch_size=32))


def of(events: list[JobEvent], jid: str) -> list[JobEvent]:
    return [e for e in events if e.job_id == jid]


def test_the_control_plane_publishes_what_the_api_server_reports(
        kube: KubeCluster, api: Api, applied: str, broker: str, conn: KafkaConnection,
        dfs: Path, demo: str, topics: ControlTopics, tmp_path: Path) -> None:
    ns = applied
    env = job_env(broker, dfs)
    env.update(KUBECONFIG=str(account_kubeconfig(kube, api, ns, "headrace-control",
                                                 tmp_path / "control.kubeconfig")),
               HEADRACE_EXECUTOR="kubernetes", HEADRACE_K8S_IMAGE=IMAGE,
               HEADRACE_K8S_NAMESPACE=ns, HEADRACE_K8S_GPU_TYPE="a100",
               HEADRACE_K8S_MAX_RETRIES="1", HEADRACE_CONTROL_HTTP_PORT="0",
               HEADRACE_TOPIC_PREFIX=topics.prefix)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = open(tmp_path / "control.log", "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen([sys.executable, "-c", "from headrace.cli import main; main()",
                             "control"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        fits, too_big = train(demo, "k8s-fits", 1), train(demo, "k8s-too-big", 8)
        send_events(conn, topics.train_requests, [fits, too_big])
        a, b = jobs.job_id_for("k8s-fits"), jobs.job_id_for("k8s-too-big")

        # Eight A100s on one node: no node has them; the scheduler's reason is published.
        waiting = wait_events(conn, topics.jobs, lambda evs: len(
            [e for e in of(evs, b) if e.kind == JobEventKind.QUEUED]) >= 2, timeout=120)
        queued = [e for e in of(waiting, b) if e.kind == JobEventKind.QUEUED]
        assert queued[0].reason is None and queued[1].reason is not None
        assert queued[1].reason.startswith("Unschedulable: 0/6 nodes are available"), queued
        assert "nvidia.com/gpu" in queued[1].reason
        [pending] = trainer_pods_of(api, ns, b)
        assert not pending["spec"].get("nodeName")
        st = jobs.read_status(dfs, b)
        assert st is not None and (st.state, st.reason) == ("queued", queued[1].reason)

        # One A100: bound, running; STARTED names the node the API server holds.
        started = wait_events(conn, topics.jobs, lambda evs: any(
            e.kind == JobEventKind.STARTED for e in of(evs, a)), timeout=120)
        [first] = [p for p in trainer_pods_of(api, ns, a) if p["status"].get("phase") == "Running"]
        node = first["spec"]["nodeName"]
        assert next(n for n in inventory.NODES if n["name"] == node).get("gpuType") == "a100"
        [ev] = [e for e in of(started, a) if e.kind == JobEventKind.STARTED]
        assert ev.message == f"1 of 1 worker(s) running on {node}"

        end_pod(api, ns, first, exit_code=1)  # the Job controller retries the pod
        second = wait_for(lambda: [p for p in trainer_pods_of(api, ns, a)
                                   if p["metadata"]["name"] != first["metadata"]["name"]
                                   and p["status"].get("phase") == "Running"],
                          timeout_s=120, what="the Job controller's second pod Running")[0]
        # What the trainer printed, served by kwok's kubelet API for every pod.
        kube.write_pod_log(PRINTED)
        end_pod(api, ns, second, exit_code=1)  # its backoff limit (1 retry) is reached
        done = wait_events(conn, topics.jobs, lambda evs: any(
            e.kind == JobEventKind.FAILED for e in of(evs, a)), timeout=120)
    finally:
        stop(proc)
    # A failed job's pod logs, read through the API server (pods/log), are what
    # `headrace jobs logs` prints: each of its two failed pods' lines.
    out = subprocess.run([sys.executable, "-c", "from headrace.cli import main; main()", "jobs",
                          "logs", a], cwd=REPO, env=job_env(broker, dfs), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == PRINTED * 2, out.stdout
    kinds = [e.kind for e in of(done, a)]
    assert kinds == [JobEventKind.QUEUED, JobEventKind.STARTED, JobEventKind.RETRYING,
                     JobEventKind.FAILED], kinds
    failed = of(done, a)[-1]
    job = [j for j in api.items(f"/apis/batch/v1/namespaces/{ns}/jobs")
           if j["metadata"]["annotations"].get("headrace.io/job-id") == a]
    [cond] = [c for c in job[0]["status"]["conditions"] if c["type"] == "Failed"]
    assert failed.reason == f"{cond['reason']}: {cond['message']}"
    assert cond["reason"] == "BackoffLimitExceeded" and job[0]["status"]["failed"] == 2
    st = jobs.read_status(dfs, a)
    assert st is not None and (st.state, st.reason) == ("failed", failed.reason)


def trainer_pods_of(api: Api, ns: str, jid: str) -> list[dict[str, Any]]:
    return [p for p in trainer_pods(api, ns)
            if p["metadata"].get("annotations", {}).get("headrace.io/job-id") == jid]
