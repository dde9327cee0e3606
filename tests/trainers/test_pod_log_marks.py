"""A pod's log lines reach the job's log once, whichever control plane mirrors them: one
restarted, or re-adopting a failed job, reads the pod's whole log again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

from headrace.contracts import Framework, Resources
from headrace.streams.clients import KafkaConnection
from headrace.trainers import jobs
from headrace.trainers.control.plane import ControlPlane
from headrace.trainers.executors.base import JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig
from tests.kube_fake import FakeKube, pod
from tests.trainers.recording_executor import RecordingExecutor


def test_a_line_mirrored_again_is_appended_once_and_new_lines_after_it(tmp_path: Path) -> None:
    jobs.job_dir(tmp_path, "j").mkdir(parents=True)
    t1, t2 = "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"
    # A second line stamped the same instant (a kubelet does that) is the next line.
    first = [(t1, 0, "boom"), (t1, 1, "same instant")]
    assert jobs.append_pod_log(tmp_path, "j", "p0", first) == 2
    # A second reader of the same lines appends nothing, and only what is new after them.
    assert jobs.append_pod_log(tmp_path, "j", "p0", first) == 0
    assert jobs.append_pod_log(tmp_path, "j", "p1", [(t1, 0, "other pod")]) == 1
    assert jobs.append_pod_log(tmp_path, "j", "p0", [first[1], (t2, 0, "later")]) == 1
    # A line with no pod (not read from one) is appended as it comes.
    plane = ControlPlane(root=tmp_path, conn=KafkaConnection(bootstrap="127.0.0.1:9"),
                         executor=RecordingExecutor())
    plane.on_executor_event("log", "no pod: a local job's line", job_id="j")
    assert jobs.log_path(tmp_path, "j").read_text() == (
        "boom\nsame instant\nother pod\nlater\nno pod: a local job's line\n")


def _executor(fake: FakeKube, root: Path) -> KubernetesExecutor:
    def on_event(kind: str, message: str, *, job_id: str, **f: object) -> None:
        if kind == "log":
            jobs.append_pod_log(root, job_id, str(f["pod"]), f["lines"])  # type: ignore[arg-type]
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
