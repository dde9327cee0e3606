"""The control plane with ``HEADRACE_EXECUTOR=kubernetes``: a train request on the real broker
becomes a Job created through the Kubernetes client, and no training runs in the control
plane's own process.

No Kubernetes API server can run on these machines, so the client is a fake that records
every call (``tests/trainers/kube_control_proc.py``); the objects it records are validated
strictly against the Kubernetes 1.30 OpenAPI schemas (kubernetes-validate) and the Pod
Security "restricted" rules.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from headrace.contracts import JobEvent, JobEventKind
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.topology.pod_security import manifest_violations
from headrace.topology.validation import validate_object
from headrace.trainers import jobs
from tests.fixtures import eventually
from tests.trainers.conftest import REPO, job_env, request, stop, wait_events

pytestmark = pytest.mark.slow


def test_train_request_becomes_a_kubernetes_job_created_through_the_client(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        tmp_path: Path) -> None:
    out = tmp_path / "created"
    out.mkdir()
    cfg = {"root": str(dfs), "bootstrap": broker, "prefix": topics.prefix, "out": str(out)}
    log = open(tmp_path / "control.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "tests.trainers.kube_control_proc",
                             json.dumps(cfg)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env=job_env(broker, dfs))
    try:
        req = request(demo, key="k8s-1", framework="tensorflow")
        send_events(conn, topics.train_requests, [req, req])
        jid = jobs.job_id_for("k8s-1")
        events = wait_events(conn, topics.jobs, lambda evs: any(
            e.job_id == jid and e.kind == JobEventKind.FAILED for e in evs), timeout=120)
    finally:
        stop(proc)
    kinds = [e.kind for e in events if e.job_id == jid]
    assert kinds.count(JobEventKind.QUEUED) == 1 and kinds.count(JobEventKind.DUPLICATE) == 1
    assert JobEventKind.STARTED in kinds and kinds[-1] == JobEventKind.FAILED, kinds
    reason = "BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert events[-1].reason == reason
    # Exactly one object went through the client: the Job, valid and restricted.
    created = sorted(out.iterdir())
    assert [p.name for p in created] == ["001-Job.json"]
    job = json.loads(created[0].read_text())
    validate_object(job)
    assert manifest_violations(job) == []
    assert job["metadata"]["namespace"] == "ml"
    assert job["metadata"]["annotations"]["headrace.io/job-id"] == jid
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "registry.example/headrace:1"
    assert c["command"][-2:] == ["run", jid]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HEADRACE_KAFKA_PASSWORD_FILE"] == "/etc/headrace/kafka-sasl/password"
    assert env["HEADRACE_MAX_EPOCHS"] == "50" and env["HEADRACE_DFS_ROOT"] == str(dfs)
    assert pod["automountServiceAccountToken"] is False
    # Nothing trained here: the job's log holds only the failed pod's lines, read once it
    # failed (the API is not asked for logs while a job runs).
    assert (dfs / "jobs" / jid / "log.txt").read_text() == "MemoryError: out of memory\n"
    st = jobs.read_status(dfs, jid)
    # Marked running when its pod ran (the STARTED event), but no step was taken here.
    assert st is not None and st.started_at is not None and st.step is None
    assert (st.state, st.reason) == ("failed", reason)


def test_kubernetes_executor_without_any_configuration_exits_at_start(
        broker: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KUBERNETES_", "KUBECONFIG", "HEADRACE_"))}
    env.update(HOME=str(tmp_path), HEADRACE_BOOTSTRAP=broker, HEADRACE_EXECUTOR="kubernetes",
               HEADRACE_DFS_ROOT=str(tmp_path / "dfs"), PYTHONPATH=str(REPO))
    headrace = [sys.executable, "-c", "from headrace.cli import main; main()"]
    no_image = subprocess.run([*headrace, "control"], env=env, capture_output=True, text=True,
                              timeout=60)
    assert no_image.returncode == 2
    assert no_image.stderr.strip().splitlines() == [
        "headrace: error: invalid control-plane settings: HEADRACE_K8S_IMAGE is not set "
        "(the trainer image, required with HEADRACE_EXECUTOR=kubernetes)"]
    env["HEADRACE_K8S_IMAGE"] = "img:1"
    no_kube = subprocess.run([*headrace, "control"], env=env, capture_output=True, text=True,
                             timeout=60)
    assert no_kube.returncode == 2
    assert no_kube.stderr.strip().splitlines() == [
        "headrace: error: no Kubernetes configuration: not running in a pod "
        "(KUBERNETES_SERVICE_HOST is unset) and no kubeconfig (KUBECONFIG or ~/.kube/config)"]
    assert not (tmp_path / "dfs" / "jobs").exists()  # it stopped before doing anything


def test_a_stalled_api_leaves_livez_healthy_and_requests_still_routed(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        tmp_path: Path) -> None:
    """Once the first Job is created the fake API hangs for 12 s. /livez fails after 5 s
    without a tick (``control_liveness_s``): shorter than the 30 s stall and 60 s default of
    the report, the same behaviour -- a blocked event loop would fail it after 5 s."""
    out = tmp_path / "created"
    out.mkdir()
    stall_s = 12.0
    cfg = {"root": str(dfs), "bootstrap": broker, "prefix": topics.prefix, "out": str(out),
           "stall_s": stall_s, "liveness_s": 5}
    log_path = tmp_path / "control.log"
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "tests.trainers.kube_control_proc",
                             json.dumps(cfg)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env=job_env(broker, dfs))
    try:
        port = int(eventually(lambda: re.search(r"probes on port (\d+)", log_path.read_text()),
                              timeout_s=60, what="the probe port").group(1))
        send_events(conn, topics.train_requests, [request(demo, key="stall-1",
                                                          framework="tensorflow")])
        stalled = eventually(lambda: (tmp_path / "stall-started").exists(), timeout_s=60,
                             what="the first Job created (the stall starts)")
        assert stalled
        begun = time.monotonic()
        send_events(conn, topics.train_requests, [request(demo, key="stall-2",
                                                          framework="tensorflow")])
        second = jobs.job_id_for("stall-2")
        codes, routed_after = [], None
        while time.monotonic() - begun < stall_s - 1:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=2) as r:
                codes.append(r.status)
            if routed_after is None and any(
                    e.job_id == second and e.kind == JobEventKind.QUEUED
                    for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.2)):
                routed_after = time.monotonic() - begun
            time.sleep(0.5)
        # Both jobs still end once the API answers again.
        first = jobs.job_id_for("stall-1")
        wait_events(conn, topics.jobs, lambda evs: {first, second} <= {
            e.job_id for e in evs if e.kind == JobEventKind.FAILED}, timeout=90)
    finally:
        stop(proc)
    assert len(codes) > 10 and set(codes) == {200}, codes
    assert routed_after is not None and routed_after < stall_s - 1, routed_after
