"""An MXNet parameter-server gang as Kubernetes would run it: each rendered pod (its
container's environment and command, its ``JOB_COMPLETION_INDEX``) runs in its own network
namespace where only the gang's pod DNS names resolve (a private ``/etc/hosts``, as the
headless Service gives real pods). The scheduler binds, servers and workers find it by name,
and a tiny model trains to completion -- compared with the same scheduler pod without
``DMLC_USE_KUBERNETES``, which cannot bind its own name ("bind failed")."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import ModelSpec, Resources, TrainRequested
from headrace.store import versions
from headrace.topology.validation import validate_all
from headrace.trainers import jobs
from headrace.trainers.distributed.weights import checksums_in_log
from headrace.trainers.executors.kubernetes_objects import TrainingJobSpec, training_objects
from tests import netns_pods

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not netns_pods.available(), reason="needs root and network namespaces (ip netns)")]

REPO = Path(__file__).resolve().parents[2]


def _pods(dfs: Path, job_id: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """Every pod of the rendered gang: (DNS name, command, environment)."""
    spec = TrainingJobSpec(job_id=job_id, model_name="churn", framework="mxnet", image="img:1",
                           workers=2, servers=1, gpus_per_worker=0, cpu="1", gang="none",
                           kafka_secret=None, dfs_root=str(dfs))
    objs = validate_all(training_objects(spec, owner_uid="u-1"))
    pods = []
    for job in (o for o in objs if o["kind"] == "Job"):
        tmpl = job["spec"]["template"]["spec"]
        container = tmpl["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        for i in range(job["spec"]["completions"]):
            name = f"{job['metadata']['name']}-{i}.{tmpl['subdomain']}"
            pods.append((name, container["command"], {**env, "JOB_COMPLETION_INDEX": str(i)}))
    return pods


def _base_env(tmp_path: Path) -> dict[str, str]:
    """What the image provides: ``python`` on PATH, the package importable, a writable /tmp."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(REPO),
            "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}


def test_each_role_of_a_rendered_mxnet_gang_binds_and_trains_when_only_pod_names_resolve(
        dfs: Path, demo: str, tmp_path: Path) -> None:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="churn",
                         framework="mxnet", dataset_uri=demo,
                         spec=ModelSpec(epochs=1, hidden=(8,), batch_size=32),
                         resources=Resources(workers=2, servers=1))
    jid, _ = jobs.create_request(dfs, req)
    pods = _pods(dfs, jid)
    assert [n.split(".")[0].rsplit("-", 3)[1:] for n, _, _ in pods] == [
        ["worker", "0", "0"], ["worker", "0", "1"], ["server", "0", "0"],
        ["scheduler", "0", "0"]]
    base = _base_env(tmp_path)
    logs: dict[str, Any] = {}
    with netns_pods.PodNetwork([n for n, _, _ in pods], tmp_path) as net:
        for name, command, env in pods:
            env = {**base, **env, "TMPDIR": str(tmp_path / "tmp")}
            logs[name] = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115
            net.run(name, command, env=env, out=logs[name])
        deadline = time.monotonic() + 180
        while any(p.poll() is None for p in net.procs) and time.monotonic() < deadline:
            time.sleep(0.5)
        codes = [p.poll() for p in net.procs]
    text = {n: (tmp_path / f"{n}.log").read_text(errors="replace") for n, _, _ in pods}
    assert codes == [0, 0, 0, 0], {n: t[-1500:] for n, t in text.items()}
    # Both workers (distinct namespaces, found only through the scheduler's name) agree.
    tagged = "".join(f"[w{i}] {line}\n" for i, (n, _, _) in enumerate(pods[:2])
                     for line in text[n].splitlines())
    sums = checksums_in_log(tagged)
    assert set(sums) == {"w0", "w1"} and sums["w0"] == sums["w1"]
    assert versions.list_versions(dfs, "churn") == [1]
    mv = versions.load_version(dfs, "churn", 1)
    assert mv.manifest.extra["distributed"] == {"strategy": "parameter_server", "workers": 2,
                                                "servers": 1}


def test_without_dmlc_use_kubernetes_the_scheduler_cannot_bind_its_own_name(
        dfs: Path, tmp_path: Path) -> None:
    name, command, env = _pods(dfs, "j-bind")[-1]
    assert env["DMLC_ROLE"] == "scheduler"
    env.pop("DMLC_USE_KUBERNETES")
    out = tmp_path / "scheduler.log"
    with netns_pods.PodNetwork([name], tmp_path) as net, open(out, "wb") as log:
        proc = net.run(name, command, env={**_base_env(tmp_path), **env,
                                           "TMPDIR": str(tmp_path)}, out=log)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
    assert proc.returncode != 0
    assert "bind failed" in out.read_text(errors="replace")
