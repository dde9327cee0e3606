"""Distributed jobs on Kubernetes: one pod template per role (workers, parameter servers, the
ps-lite scheduler), as a JobSet when its CRD is present or as indexed Jobs sharing a headless
Service otherwise. Every object validates strictly for every Kubernetes version the chart
declares (kubernetes-validate; no API server runs here), every pod's entrypoint -- run for real
with /bin/sh and each JOB_COMPLETION_INDEX -- exports its role and the right peers, and a
failed gang is recreated whole as the next attempt (fake API client)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import kubernetes_validate
import pytest
from kubernetes.utils.quantity import parse_quantity

from headrace.contracts import Framework, Resources
from headrace.core.errors import ValidationFailed
from headrace.topology.training import TrainingJobSpec, training_objects
from headrace.topology.validation import validate_all
from headrace.trainers.executors.base import JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig
from headrace.trainers.executors.kubernetes_objects import gang_requests
from tests.kube_fake import FakeKube as FakeCluster
from tests.kube_fake import pod

REPO = Path(__file__).resolve().parents[2]


def chart_versions() -> list[str]:
    """Every Kubernetes minor the chart's ``kubeVersion`` admits that has schemas here."""
    chart = next((REPO / "helm").glob("*/Chart.yaml")).read_text()
    low = re.search(r'kubeVersion:\s*">=\s*1\.(\d+)', chart)
    assert low, "the chart declares a minimum Kubernetes version"
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    minors = sorted({int(m.group(1)) for d in os.listdir(root)
                     if (m := re.fullmatch(r"v1\.(\d+)\.0-local-strict", d))})
    return [f"1.{m}.0" for m in minors if m >= int(low.group(1))]


def jobs_of(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each role's Job (``worker``/``server``/``scheduler``), from separate Jobs or a JobSet."""
    out = {}
    for o in objs:
        if o["kind"] == "Job":
            out[o["spec"]["template"]["metadata"]["labels"]["headrace.io/role"]] = o
        if o["kind"] == "JobSet":
            for rj in o["spec"]["replicatedJobs"]:
                out[rj["name"]] = {"metadata": {"name": f"{o['metadata']['name']}-"
                                                        f"{rj['name']}-0"},
                                   "spec": rj["template"]["spec"]}
    return out


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


def requests_of(job: dict[str, Any]) -> dict[str, float]:
    c = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    return {k: float(parse_quantity(v)) for k, v in c.items()}


def test_a_four_worker_tensorflow_gang_names_every_peer_in_each_pods_tf_config(
        tmp_path: Path) -> None:
    spec = TrainingJobSpec(job_id="job-4", model_name="churn", framework="tensorflow",
                           image="img:1", workers=4, gpus_per_worker=1, cpu="8")
    job, pg, svc, _netpol = validate_all(training_objects(spec, owner_uid="u-1"))
    assert pg["spec"]["minMember"] == 4 and job["spec"]["completions"] == 4
    assert job["spec"]["backoffLimit"] == 0  # a gang restarts whole, never one pod
    assert job["spec"]["suspend"] is True  # until its PodGroup and Service exist
    assert svc["metadata"]["name"] == job["spec"]["template"]["spec"]["subdomain"]
    peers = [f"train-job-4-worker-0-{i}.train-job-4:2222" for i in range(4)]
    for i in range(4):
        env = _pod_env(job, i, tmp_path)
        assert json.loads(env["TF_CONFIG"]) == {"cluster": {"worker": peers},
                                                "task": {"type": "worker", "index": i}}
        assert (env["HEADRACE_GANG_ROLE"], env["HEADRACE_WORKER_INDEX"]) == ("worker", str(i))
        assert env["HEADRACE_STRATEGY"] == "allreduce" and env["HEADRACE_WORKERS"] == "4"
        assert env["OMP_NUM_THREADS"] == "8"  # one pod per node: its own CPU request
        assert env["ARGV"] == "-m headrace.trainers run job-4"


def test_a_torch_gang_rendezvouses_at_worker_0_and_its_policy_admits_gloos_pair_ports(
        tmp_path: Path) -> None:
    from headrace.trainers.distributed.peers import rendezvous

    spec = TrainingJobSpec(job_id="job-t", model_name="churn", framework="torch",
                           image="img:1", workers=3, cpu="4")
    job, _pg, _svc, netpol = validate_all(training_objects(spec, owner_uid="u-1"))
    for i in range(3):
        env = _pod_env(job, i, tmp_path)
        assert env["HEADRACE_STRATEGY"] == "allreduce" and env["HEADRACE_WORKER_INDEX"] == str(i)
        # torch.distributed's store: worker 0 through the gang's headless Service
        assert rendezvous(env) == ("train-job-t-worker-0-0.train-job-t", 2222)
    (rule,) = netpol["spec"]["ingress"]
    assert {(p["port"], p.get("endPort")) for p in rule["ports"]} == {(2222, None),
                                                                     (32768, 60999)}
    tf = TrainingJobSpec(job_id="job-f", model_name="churn", framework="tensorflow",
                         image="img:1", workers=3)
    (tf_rule,) = validate_all(training_objects(tf, owner_uid="u-1"))[3]["spec"]["ingress"]
    assert [p["port"] for p in tf_rule["ports"]] == [2222]  # TensorFlow's stays one port
    with pytest.raises(ValidationFailed, match=r"^PyTorch with strategy parameter_server"):
        TrainingJobSpec(job_id="j", model_name="m", framework="torch", image="i", workers=2,
                        servers=1, strategy="parameter_server")


@pytest.mark.parametrize("jobset", [False, True])
def test_each_role_of_an_mxnet_gang_has_its_own_resources_and_the_gang_counts_them(
        tmp_path: Path, jobset: bool) -> None:
    spec = TrainingJobSpec(job_id="job-ps", model_name="churn", framework="mxnet",
                           image="img:1", workers=2, servers=1, gpus_per_worker=4, cpu="8",
                           memory="32Gi", jobset=jobset)
    objs = validate_all(training_objects(spec, owner_uid="u-1"))
    [pg] = [o for o in objs if o["kind"] == "PodGroup"]
    roles = jobs_of(objs)
    assert {r: j["spec"]["completions"] for r, j in roles.items()} == {
        "worker": 2, "server": 1, "scheduler": 1}
    assert requests_of(roles["worker"])["nvidia.com/gpu"] == 4
    for role in ("server", "scheduler"):  # CPU-only unless asked: no GPU, no GPU toleration
        assert "nvidia.com/gpu" not in requests_of(roles[role])
        assert "tolerations" not in roles[role]["spec"]["template"]["spec"]
    # The PodGroup (and what Kueue would count) is the sum of every role's real requests.
    total: dict[str, float] = {}
    for j in roles.values():
        for k, v in requests_of(j).items():
            total[k] = total.get(k, 0) + v * j["spec"]["parallelism"]
    assert {k: float(parse_quantity(v)) for k, v in pg["spec"]["minResources"].items()} == total
    assert total["nvidia.com/gpu"] == 8 and pg["spec"]["minMember"] == 4  # not 16 GPUs
    assert pg["spec"]["minResources"] == gang_requests(spec)
    # Every Job has the deadline; every gang object but the owner is owned by it.
    assert all(j["spec"]["activeDeadlineSeconds"] == spec.active_deadline_s
               for j in roles.values())
    owner = objs[0]
    assert owner["kind"] == ("JobSet" if jobset else "Job")
    for o in objs[1:]:
        [ref] = o["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (owner["kind"],
                                                          owner["metadata"]["name"], "u-1")
    scheduler = "train-job-ps-scheduler-0-0.train-job-ps"
    seen = {}
    for role, job in roles.items():
        for i in range(job["spec"]["completions"]):
            env = _pod_env(job, i, tmp_path)
            assert env["DMLC_PS_ROOT_URI"] == scheduler and env["DMLC_USE_KUBERNETES"] == "1"
            assert (env["DMLC_PS_ROOT_PORT"], env["DMLC_NUM_WORKER"], env["DMLC_NUM_SERVER"]) == (
                "9091", "2", "1")
            assert env["DMLC_ROLE"] == env["HEADRACE_GANG_ROLE"] == role
            seen[f"{role}{i}"] = (env["HEADRACE_WORKER_INDEX"], env["ARGV"])
    assert seen == {"worker0": ("0", "-m headrace.trainers run job-ps"),
                    "worker1": ("1", "-m headrace.trainers run job-ps"),
                    "server0": ("0", "-m headrace.trainers ps-node"),
                    "scheduler0": ("0", "-m headrace.trainers ps-node")}


@pytest.mark.parametrize("version", chart_versions())
@pytest.mark.parametrize("jobset", [False, True])
def test_gang_objects_validate_strictly_for_every_kubernetes_version_the_chart_declares(
        version: str, jobset: bool) -> None:
    for framework, servers in (("mxnet", 2), ("tensorflow", 0), ("torch", 0)):
        spec = TrainingJobSpec(job_id="job-v", model_name="m", framework=framework,
                               image="img:1", workers=2, servers=servers, jobset=jobset,
                               server_gpus=1 if servers else 0)
        objs = validate_all(training_objects(spec, owner_uid="u-1"), version=version)
        # Owner, PodGroup, NetworkPolicy (+ Service and the other roles' Jobs without JobSet).
        assert len(objs) == (3 if jobset else 4 + (2 if servers else 0))


def test_kueue_needs_a_queue_and_jobset_for_parameter_servers() -> None:
    with pytest.raises(ValidationFailed, match=r"^gang kueue needs a queue") as err:
        TrainingJobSpec(job_id="j", model_name="m", framework="tensorflow", image="i",
                        workers=2, gang="kueue")
    assert "\n" not in str(err.value)
    with pytest.raises(ValidationFailed, match="needs the JobSet CRD"):
        TrainingJobSpec(job_id="j", model_name="m", framework="mxnet", image="i", workers=2,
                        gang="kueue", queue="q")
    spec = TrainingJobSpec(job_id="j", model_name="m", framework="mxnet", image="i", workers=2,
                           gang="kueue", queue="q", jobset=True)
    js, netpol = validate_all(training_objects(spec, owner_uid="u-1"))
    assert netpol["kind"] == "NetworkPolicy"
    assert js["spec"]["suspend"] is True  # Kueue admits the whole gang against quota
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    # And the control plane's settings refuse it at start, in one line.
    from headrace.core.errors import ConfigError
    from headrace.trainers.control.settings import load_control_settings

    with pytest.raises(ConfigError, match="HEADRACE_K8S_QUEUE is not set") as err2:
        load_control_settings(executor="kubernetes", k8s_image="i", k8s_gang="kueue")
    assert "\n" not in str(err2.value)


def test_tensorflow_with_parameter_servers_is_refused_in_one_line() -> None:
    with pytest.raises(ValidationFailed, match=r"^TensorFlow with strategy parameter_server "
                                               r"is not supported") as err:
        TrainingJobSpec(job_id="j", model_name="m", framework="tensorflow", image="i",
                        workers=2, servers=1, strategy="parameter_server")
    assert "\n" not in str(err.value)


def _executor(fake: FakeCluster, events: list[Any], **config: Any) -> KubernetesExecutor:
    return KubernetesExecutor(config=KubernetesExecutorConfig(image="img:1", **config),
                              batch_api=fake, core_api=fake, custom_api=fake, backoff_s=0,
                              networking_api=fake,
                              on_event=lambda kind, message, **f: events.append(
                                  (kind, message, f)))


FAILED = [NS(type="Failed", status="True", reason="BackoffLimitExceeded", message="")]


def test_a_failed_gang_job_is_recreated_whole_as_the_next_attempt() -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = _executor(fake, events, max_retries=1)
    ex.submit(JobSpec(job_id="job-g", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1)))
    assert fake.names("Job") == ["train-job-g-worker-0", "train-job-g-server-0",
                                 "train-job-g-scheduler-0"]
    fake.pods = [pod("train-job-g-worker-0-1-xyz", phase="Failed", exit_code=137)]
    fake.statuses["train-job-g-server-0"] = NS(active=0, failed=1, conditions=FAILED)
    assert ex.poll() == []
    # The old attempt deleted with everything it owned, the gang recreated.
    assert fake.names("Job") == ["train-job-g-a2-worker-0", "train-job-g-a2-server-0",
                                 "train-job-g-a2-scheduler-0"]
    assert fake.names("Service") == ["train-job-g-a2"]
    new = validate_all([fake.jobs["train-job-g-a2-worker-0"]])[0]
    cmd = new["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "train-job-g-a2-scheduler-0-0.train-job-g-a2" in json.dumps(new)
    assert "exec python -m headrace.trainers run job-g" in cmd
    assert [k for k, _, _ in events][-1] == "retrying"
    fake.statuses["train-job-g-a2-worker-0"] = NS(active=0, failed=1, conditions=FAILED)
    [outcome] = ex.poll()  # attempt 2 fails too: the retry budget (1) is spent
    assert not outcome.succeeded


def test_a_preempted_gang_member_restarts_the_gang_without_using_a_retry() -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = _executor(fake, events, max_retries=0, gang="none")
    ex.submit(JobSpec(job_id="job-p", model_name="churn", framework=Framework.TENSORFLOW,
                      resources=Resources(workers=2)))
    fake.status = NS(active=0, failed=1, conditions=FAILED)
    for attempt in (2, 3):  # preempted twice: restarted twice with no retry budget at all
        fake.pods = [pod(f"x-{attempt}", phase="Failed", exit_code=143, disrupted=True)]
        assert ex.poll() == []
        assert fake.names("Job") == [f"train-job-p-a{attempt}-worker-0"]
    fake.pods = [pod("x", phase="Failed", exit_code=1)]  # a real failure: no budget left
    [outcome] = ex.poll()
    assert not outcome.succeeded


def test_a_jobset_gang_is_one_jobset_and_completes_when_its_workers_do() -> None:
    from headrace.trainers.executors.kubernetes import KubeApis, jobset_installed

    without = FakeCluster()
    assert not jobset_installed(KubeApis(batch=without, core=without, custom=without))
    fake = FakeCluster(jobset_crd=True)
    assert jobset_installed(KubeApis(batch=fake, core=fake, custom=fake))
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = _executor(fake, events, jobset=True)
    ex.submit(JobSpec(job_id="job-j", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1, gpus=1)))
    assert [k for k, _ in fake.objects] == ["JobSet", "PodGroup", "NetworkPolicy"]
    js = fake.objects[("JobSet", "train-job-j")]
    assert js["spec"]["suspend"] is False  # let go once its PodGroup existed
    fake.objects[("JobSet", "train-job-j")]["status"] = {
        "conditions": [{"type": "Completed", "status": "True"}],
        "replicatedJobsStatus": [{"name": "worker", "active": 0, "failed": 0}]}
    [outcome] = ex.poll()
    assert outcome.succeeded


def test_gang_pod_log_lines_are_mirrored_with_the_members_tag() -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = _executor(fake, events)
    ex.submit(JobSpec(job_id="job-l", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1)))
    names = ["train-job-l-worker-0-0-ab", "train-job-l-worker-0-1-ab",
             "train-job-l-server-0-0-ab", "train-job-l-scheduler-0-0-ab"]
    fake.pods = [pod(n) for n in names]
    for i, n in enumerate(names):
        fake.logs[n] = f"2024-01-01T00:00:01Z line {i}\n"
    assert ex.logs("job-l") == [
        "[sched] line 3", "[s0] line 2", "[w0] line 0", "[w1] line 1"]


def test_a_restarted_executor_adopts_the_recorded_attempt_instead_of_creating_another() -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    first = _executor(fake, events, max_retries=3)
    job = JobSpec(job_id="job-r", model_name="churn", framework=Framework.MXNET,
                  resources=Resources(workers=2, servers=1))
    first.submit(job)
    fake.statuses["train-job-r-worker-0"] = NS(active=0, failed=1, conditions=FAILED)
    fake.pods = [pod("train-job-r-worker-0-1-x", phase="Failed", exit_code=137)]
    assert first.poll() == []  # the gang restarted as attempt 2
    handle = first.handle("job-r")
    assert handle == {"kind": "kubernetes", "name": "train-job-r-a2", "attempt": 2,
                      "restarts": 1}
    first.close()  # the control plane dies; its Jobs live on
    created = fake.count("create", "Job")

    second = _executor(fake, events, max_retries=3)  # restarted, with the job table's handle
    assert second.adopt(job, handle)
    assert second.poll() == []
    assert fake.count("create", "Job") == created  # nothing created beside attempt 2
    assert fake.names("Job") == [f"train-job-r-a2-{r}-0" for r in ("worker", "server",
                                                                    "scheduler")]
    fake.statuses["train-job-r-a2-worker-0"] = NS(active=0, failed=0, conditions=[
        NS(type="Complete", status="True", reason=None, message=None)])
    [outcome] = second.poll()
    assert outcome.succeeded

    # A handle whose attempt vanished while no control plane ran: the next attempt starts.
    fake.objects.clear()
    third = _executor(fake, events, max_retries=3)
    assert third.adopt(job, handle) and third.poll() == []
    assert fake.names("Job")[0] == "train-job-r-a3-worker-0"


def test_a_hung_gang_is_restarted_by_the_watchdog_from_its_heartbeats(tmp_path: Path) -> None:
    from headrace.trainers.distributed.heartbeat import Heartbeat, heartbeat_dir

    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = _executor(fake, events, dfs_root=str(tmp_path), watchdog_s=0.3, gang="none")
    ex.submit(JobSpec(job_id="job-h", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1)))
    fake.status = NS(active=4, failed=0, conditions=[])
    assert ex.poll() == []  # running; no step yet: the watchdog is not armed
    time.sleep(0.4)
    assert ex.poll() == [] and fake.names("Job")[0] == "train-job-h-worker-0"
    Heartbeat(tmp_path, "job-h", "w0")()  # a step...
    assert ex.poll() == []
    time.sleep(0.4)  # ...then nothing: a member is frozen
    assert ex.poll() == []
    assert fake.names("Job")[0] == "train-job-h-a2-worker-0"
    [why] = [m for k, m, _ in events if k == "retrying"]
    assert why.startswith("hung: w0 made no training step for 0s (watchdog 0.3s): restarting "
                          "all 4 pods as train-job-h-a2 from the last checkpoint"), why
    assert (heartbeat_dir(tmp_path, "job-h") / "w0").exists()


def test_a_gang_with_no_first_step_by_its_start_up_deadline_is_restarted(
        tmp_path: Path) -> None:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = _executor(fake, events, dfs_root=str(tmp_path), watchdog_s=600, startup_s=0.3,
                   gang="none")
    ex.submit(JobSpec(job_id="job-s", model_name="churn", framework=Framework.MXNET,
                      resources=Resources(workers=2, servers=1)))
    fake.status = NS(active=4, failed=0, conditions=[])
    assert ex.poll() == [] and fake.names("Job")[0] == "train-job-s-worker-0"
    time.sleep(0.4)  # a server frozen in start-up: no member ever steps
    assert ex.poll() == []
    assert fake.names("Job")[0] == "train-job-s-a2-worker-0"
    [why] = [m for k, m, _ in events if k == "retrying"]
    assert why.startswith("no first training step within 0.3s of the start (start-up "
                          "deadline)"), why
