"""Distributed jobs on Kubernetes: a 4-worker TensorFlow gang and a 2-worker + 1-server MXNet
gang validate strictly (kubernetes-validate; no API server runs here), every pod's entrypoint
-- run for real with /bin/sh and each JOB_COMPLETION_INDEX -- exports its role and the right
peers, and a failed gang Job is recreated whole as the next attempt (fake API client)."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest

from headrace.contracts import Framework, Resources
from headrace.core.errors import ValidationFailed
from headrace.topology.training import TrainingJobSpec, training_objects
from headrace.topology.validation import validate_all
from headrace.trainers.executors.base import JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig
from tests.topology.test_kubernetes_executor import FakeCluster, pod


def _pod_env(job: dict[str, Any], index: int, tmp_path: Path) -> dict[str, str]:
    """Run the pod's entrypoint with a fake ``python`` that records its env and argv."""
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nenv > "$OUT"\necho "ARGV=$*" >> "$OUT"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    container = job["spec"]["template"]["spec"]["containers"][0]
    static = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    out = tmp_path / f"env-{index}"
    subprocess.run(container["command"], check=True, capture_output=True,
                   env={**static, "PATH": f"{tmp_path}:/usr/bin:/bin", "OUT": str(out),
                        "JOB_COMPLETION_INDEX": str(index)})
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)


def test_a_four_worker_tensorflow_gang_names_every_peer_in_each_pods_tf_config(
        tmp_path: Path) -> None:
    spec = TrainingJobSpec(job_id="job-4", model_name="churn", framework="tensorflow",
                           image="img:1", workers=4, gpus_per_worker=1, cpu="8")
    pg, _svc, job = validate_all(training_objects(spec))
    assert pg["spec"]["minMember"] == 4 and job["spec"]["completions"] == 4
    assert job["spec"]["backoffLimit"] == 0  # a gang restarts whole, never one pod
    peers = [f"train-job-4-{i}.train-job-4:2222" for i in range(4)]
    for i in range(4):
        env = _pod_env(job, i, tmp_path)
        assert json.loads(env["TF_CONFIG"]) == {"cluster": {"worker": peers},
                                                "task": {"type": "worker", "index": i}}
        assert (env["HEADRACE_GANG_ROLE"], env["HEADRACE_WORKER_INDEX"]) == ("worker", str(i))
        assert env["HEADRACE_STRATEGY"] == "allreduce" and env["HEADRACE_WORKERS"] == "4"
        assert env["OMP_NUM_THREADS"] == "8"  # one pod per node: its own CPU request
        assert env["ARGV"] == "-m headrace.trainers run job-4"


def test_a_two_worker_one_server_mxnet_gang_points_every_pod_at_the_scheduler(
        tmp_path: Path) -> None:
    spec = TrainingJobSpec(job_id="job-ps", model_name="churn", framework="mxnet",
                           image="img:1", workers=2, servers=1, gpus_per_worker=0)
    pg, svc, job = validate_all(training_objects(spec))
    assert pg["spec"]["minMember"] == 4 and job["spec"]["completions"] == 4
    assert [p["port"] for p in svc["spec"]["ports"]] == [9091]
    roles = {}
    for i in range(4):
        env = _pod_env(job, i, tmp_path)
        assert env["DMLC_PS_ROOT_URI"] == "train-job-ps-3.train-job-ps"  # the scheduler pod
        assert (env["DMLC_PS_ROOT_PORT"], env["DMLC_NUM_WORKER"], env["DMLC_NUM_SERVER"]) == (
            "9091", "2", "1")
        roles[i] = (env["DMLC_ROLE"], env["ARGV"])
        if env["DMLC_ROLE"] == "worker":
            assert env["HEADRACE_WORKER_INDEX"] == str(i)
    assert roles == {0: ("worker", "-m headrace.trainers run job-ps"),
                     1: ("worker", "-m headrace.trainers run job-ps"),
                     2: ("server", "-m headrace.trainers ps-node"),
                     3: ("scheduler", "-m headrace.trainers ps-node")}


def test_tensorflow_with_parameter_servers_is_refused_in_one_line() -> None:
    with pytest.raises(ValidationFailed, match=r"^TensorFlow with strategy parameter_server "
                                               r"is not supported") as err:
        TrainingJobSpec(job_id="j", model_name="m", framework="tensorflow", image="i",
                        workers=2, servers=1, strategy="parameter_server")
    assert "\n" not in str(err.value)


def test_a_failed_gang_job_is_recreated_whole_as_the_next_attempt() -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = KubernetesExecutor(config=KubernetesExecutorConfig(image="img:1", max_retries=1),
                            batch_api=fake, core_api=fake, custom_api=fake,
                            on_event=lambda kind, message, **f: events.append((kind, message, f)))
    ex.submit(JobSpec(job_id="job-g", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1)))
    assert list(fake.jobs) == ["train-job-g"]
    failed = [NS(type="Failed", status="True", reason="BackoffLimitExceeded", message="")]
    fake.pods = [pod("train-job-g-1", phase="Failed", exit_code=137)]  # a worker SIGKILLed
    fake.status.conditions = failed
    assert ex.poll() == []
    assert list(fake.jobs) == ["train-job-g-a2"]  # the old Job deleted, the gang recreated
    new = validate_all([fake.jobs["train-job-g-a2"]])[0]
    cmd = new["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "train-job-g-a2-3.train-job-g" in json.dumps(new)  # peers of the new attempt
    assert "exec python -m headrace.trainers run job-g" in cmd
    assert [k for k, _, _ in events][-1] == "retrying"
    [outcome] = ex.poll()  # attempt 2 fails too: the retry budget (1) is spent
    assert not outcome.succeeded


def test_gang_pod_log_lines_are_mirrored_with_the_members_tag() -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = KubernetesExecutor(config=KubernetesExecutorConfig(image="img:1"), batch_api=fake,
                            core_api=fake, custom_api=fake,
                            on_event=lambda kind, message, **f: events.append((kind, message, f)))
    ex.submit(JobSpec(job_id="job-l", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1)))
    fake.pods = [pod(f"train-job-l-{i}-abcde") for i in range(4)]
    for i in range(4):
        fake.logs[f"train-job-l-{i}-abcde"] = f"2024-01-01T00:00:01Z line {i}\n"
    ex.poll()
    assert [m for k, m, _ in events if k == "log"] == [
        "[w0] line 0", "[w1] line 1", "[s0] line 2", "[sched] line 3"]
