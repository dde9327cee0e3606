"""Every pod Headrace deploys passes Pod Security "restricted" and a maintained policy checker.

* The chart is rendered with helm-python-sdk for every value set of ``test_chart`` (GPU
  scorers, Volcano and Kueue gangs, KEDA, an existing Secret, schedules) and each workload's
  pod spec is checked against the restricted profile written out in
  ``headrace.topology.pod_security`` (what the pod-security admission controller enforces: no
  API server runs here). The training Jobs the KubernetesExecutor creates
  (``kubernetes_objects``) and the scorer objects ``headrace topology apply`` renders from the
  chart for a plan are checked too.
* checkov (PyPI, run offline with ``--skip-download``) scans the same rendered manifests. It is
  installed in its own virtual environment (its pins clash with ours): ``./dev test`` creates
  ``.venv-tools``; ``HEADRACE_CHECKOV`` points elsewhere. Without it the test skips, except
  under CI (``CI`` set), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from headrace.core.errors import ValidationFailed
from headrace.topology.cluster import parse_cluster
from headrace.topology.commands import build_objects
from headrace.topology.planning import plan_placement
from headrace.topology.pod_security import manifest_violations, pod_spec_of, violations
from headrace.topology.validation import to_manifest, validate_object
from headrace.trainers.executors.kubernetes_objects import (
    TrainingJobSpec,
    training_objects,
)
from tests.chart.test_chart import CHART, VALUE_SETS, render_docs
from tests.topology.conftest import cpu_node, gpu_node

REPO = Path(__file__).resolve().parents[2]
# checkov checks skipped for the whole chart, each with the reason it does not apply.
CHECKOV_SKIPS = {
    "CKV_K8S_11": "no CPU limits on purpose: CFS throttling hurts scoring latency; requests "
                  "reserve the CPU",
    "CKV_K8S_15": "pullPolicy is a value; pinning by image.digest is the supported way",
    "CKV_K8S_21": "objects are namespaced by `helm install -n`",
    "CKV_K8S_35": "only bootstrap servers and non-secret client settings come from the Secret "
                  "as env; the SASL password is a mounted file",
    "CKV_K8S_43": "image.digest pins the image when set; a tag stays allowed",
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    with helm.Chart.load(CHART) as chart:
        return {name: render_docs(chart, values) for name, values in VALUE_SETS.items()}


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if pod_spec_of(d) is not None]


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_rendered_workload_passes_the_restricted_profile(rendered: Any, name: str) -> None:
    pods = workloads(rendered[name])
    assert pods, "each value set deploys at least the control plane"
    for w in pods:
        assert manifest_violations(w) == []
        pod = pod_spec_of(w)
        assert pod is not None
        sc = pod["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (10001, 10001, 10001)
        c = pod["containers"][0]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert mounts["/tmp"] == "tmp"
        assert {"name": "HOME", "value": "/tmp"} in c["env"]


def test_the_restricted_checks_catch_each_kind_of_violation() -> None:
    bad = {"hostNetwork": True,
           "securityContext": {"runAsUser": 0},
           "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
           "containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 80}],
                           "securityContext": {"privileged": True,
                                               "capabilities": {"add": ["SYS_ADMIN"]},
                                               "seccompProfile": {"type": "Unconfined"}}}]}
    found = "\n".join(violations(bad))
    for needle in ("hostNetwork", "hostPath", "runAsUser=0", "privileged", "hostPort",
                   "allowPrivilegeEscalation", "runAsNonRoot", "seccompProfile Unconfined",
                   "drop ALL", "SYS_ADMIN"):
        assert needle in found


@pytest.mark.parametrize("kw", [
    {},
    {"workers": 4, "gang": "volcano", "gpu_type": "a100"},
    {"workers": 2, "gang": "kueue", "queue": "team-a"},
    {"gpus_per_worker": 0, "kafka_password_file": "/etc/headrace/kafka-sasl/password",
     "kafka_ca_secret": "corp-ca"},
])
def test_training_jobs_the_executor_builds_pass_the_restricted_profile(kw: dict[str, Any]
                                                                       ) -> None:
    spec = TrainingJobSpec(job_id="j-0123456789ab", model_name="churn",
                           framework="tensorflow", image="img:1", **kw)
    for obj in training_objects(spec):
        manifest = validate_object(obj)
        assert manifest_violations(manifest) == []
        pod = pod_spec_of(manifest)
        if pod is not None:
            assert pod["automountServiceAccountToken"] is False
            assert pod["serviceAccountName"] == "headrace-trainer"
    job = to_manifest(training_objects(spec)[0])
    pod = job["spec"]["template"]["spec"]
    if kw.get("kafka_password_file"):
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["kafka-sasl"] == {"name": "kafka-sasl", "mountPath":
                                        "/etc/headrace/kafka-sasl", "readOnly": True}
        assert mounts["kafka-tls"]["readOnly"] is True


def test_the_charts_schedule_cronjob_passes_the_restricted_profile(rendered: Any) -> None:
    """The chart is the CronJob's one source (no Python builder beside it)."""
    [cron] = [d for d in rendered["schedules"] if d["kind"] == "CronJob"]
    assert manifest_violations(validate_object(cron)) == []
    fire = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert fire["command"] == ["headrace", "schedule", "fire", "nightly"]
    assert {"name": "HEADRACE_TRIGGERS", "value": "/etc/headrace/triggers/triggers.yaml"} in fire[
        "env"]


def test_planned_scorers_pass_the_restricted_profile() -> None:
    cluster = parse_cluster({
        "nodes": [gpu_node("a1", "r1", "z1", 2, "a100"), cpu_node("c1", "r1", "z1")],
        "streams": [{"name": "clicks", "partitions": 4, "rackCycle": ["r1"]}],
        "scorer": {"gpus": 1},
    })
    objs = build_objects(cluster=cluster, plan=plan_placement(cluster=cluster))
    pods = workloads(objs)
    assert pods
    for w in pods:
        assert manifest_violations(w) == []
        pod = pod_spec_of(w) or {}
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["dfs"]["readOnly"] is True


def _checkov() -> str | None:
    for candidate in (os.environ.get("HEADRACE_CHECKOV"), str(REPO / ".venv-tools/bin/checkov"),
                      shutil.which("checkov")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.mark.slow
def test_checkov_passes_every_rendered_manifest(rendered: Any, tmp_path: Path) -> None:
    checkov = _checkov()
    if checkov is None:
        if os.environ.get("CI"):
            pytest.fail("checkov is not installed (./dev test installs it into .venv-tools)")
        pytest.skip("checkov not installed: ./dev test installs it into .venv-tools")
    for name, docs in rendered.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run(
        [checkov, "-d", str(tmp_path), "--framework", "kubernetes", "--skip-download",
         "--quiet", "--compact", "-o", "json", "--skip-check", ",".join(CHECKOV_SKIPS)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "LOG_LEVEL": "ERROR"})
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [f"{f['check_id']} {f['resource']} ({f['file_path']})"
              for r in reports for f in r["results"]["failed_checks"]]
    passed = sum(r["summary"]["passed"] for r in reports)
    assert failed == []
    assert passed > 500  # it really checked the manifests (~1600 checks pass)


def test_validation_refuses_a_workload_that_is_not_restricted() -> None:
    spec = TrainingJobSpec(job_id="j-0123456789ab", model_name="churn", framework="tensorflow",
                           image="img:1")
    job = to_manifest(training_objects(spec)[-1])
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "allowPrivilegeEscalation"] = True
    with pytest.raises(ValidationFailed, match=r"restricted.*allowPrivilegeEscalation"):
        validate_object(job)
    assert validate_object(job, pod_security=False)["kind"] == "Job"
