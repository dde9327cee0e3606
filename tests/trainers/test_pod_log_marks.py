"""A pod's log lines reach the job's log once, whichever control plane mirrors them: one
restarted, or re-adopting a failed job, reads the pod's whole log again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

from headrace.contracts import Framework, Resources
from headrace.trainers import jobs
from headrace.trainers.executors.base import JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig
from tests.kube_fake import FakeKube, pod


def test_a_line_mirrored_again_is_appended_once_and_new_lines_after_it(tmp_path: Path) -> None:
    jobs.job_dir(tmp_path, "j").mkdir(parents=True)
    t1, t2 = "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"
    assert jobs.append_pod_log(tmp_path, "j", "boom", pod="p0", ts=t1)
    # A second line stamped the same instant (a kubelet does that) is the next line.
    assert jobs.append_pod_log(tmp_path, "j", "same instant", pod="p0", ts=t1, seq=1)
    assert not jobs.append_pod_log(tmp_path, "j", "boom", pod="p0", ts=t1)  # a second reader
    assert not jobs.append_pod_log(tmp_path, "j", "same instant", pod="p0", ts=t1, seq=1)
    assert jobs.append_pod_log(tmp_path, "j", "other pod", pod="p1", ts=t1)
    assert jobs.append_pod_log(tmp_path, "j", "later", pod="p0", ts=t2)
    assert jobs.append_pod_log(tmp_path, "j", "no pod: a local job's line")
    assert jobs.log_path(tmp_path, "j").read_text() == (
        "boom\nsame instant\nother pod\nlater\nno pod: a local job's line\n")


def _executor(fake: FakeKube, root: Path) -> KubernetesExecutor:
    def on_event(kind: str, message: str, *, job_id: str, **f: object) -> None:
        if kind == "log":
            jobs.append_pod_log(root, job_id, message, pod=str(f["pod"]), ts=str(f["ts"]),
                                seq=int(str(f["seq"])))
    return KubernetesExecutor(config=KubernetesExecutorConfig(image="img:1"), batch_api=fake,
                              core_api=fake, custom_api=fake, networking_api=fake,
                              on_event=on_event, backoff_s=0)


def test_two_executors_mirroring_one_failed_job_leave_each_line_once(tmp_path: Path) -> None:
    jobs.job_dir(tmp_path, "job-1").mkdir(parents=True)
    fake = FakeKube()
    spec = JobSpec(job_id="job-1", model_name="m", framework=Framework.TENSORFLOW,
                   resources=Resources(workers=1))
    first = _executor(fake, tmp_path)
    first.submit(spec)
    fake.pods = [pod("p0", phase="Failed", exit_code=1)]
    fake.logs["p0"] = ("2024-01-01T00:00:01Z epoch 1\n2024-01-01T00:00:02Z MemoryError\n"
                       "2024-01-01T00:00:02Z Traceback ends\n")  # two lines, one instant
    # `jobs logs` while it runs reads every line and marks none.
    assert first.logs("job-1") == ["epoch 1", "MemoryError", "Traceback ends"]
    fake.status.failed = 4
    fake.status.conditions = [NS(type="Failed", status="True", reason="BackoffLimitExceeded",
                                 message="")]
    [outcome] = first.poll()
    assert not outcome.succeeded
    second = _executor(fake, tmp_path)  # a restarted control plane adopts the same Job
    assert second.adopt(spec, first.handle("job-1") or {"kind": "kubernetes", "attempt": 1})
    second.poll()
    assert jobs.log_path(tmp_path, "job-1").read_text() == (
        "epoch 1\nMemoryError\nTraceback ends\n")
