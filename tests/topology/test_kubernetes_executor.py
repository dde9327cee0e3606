from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from headrace.contracts import Framework, Resources
from headrace.core.errors import ConfigError, RetriableError
from headrace.topology.validation import validate_object
from headrace.trainers.executors.base import Executor, JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig


class ApiError(Exception):
    def __init__(self, status: int | None) -> None:
        super().__init__(f"status {status}")
        self.status = status
        self.reason = f"status {status}"


class FakeCluster:
    """Batch, Core and CustomObjects APIs over in-memory objects."""

    def __init__(self) -> None:
        self.created: list[Any] = []
        self.jobs: dict[str, Any] = {}
        self.status = NS(active=0, failed=0, succeeded=0, conditions=[])
        self.pods: list[Any] = []
        self.logs: dict[str, str] = {}
        self.fail_with: int | None = None

    def create_namespaced_job(self, ns: str, body: Any) -> Any:
        if self.fail_with:
            raise ApiError(self.fail_with)
        if body.metadata.name in self.jobs:
            raise ApiError(409)
        self.jobs[body.metadata.name] = body
        self.created.append(body)
        return body

    def create_namespaced_service(self, ns: str, body: Any) -> Any:
        self.created.append(body)
        return body

    def create_namespaced_custom_object(self, **kw: Any) -> Any:
        self.created.append(kw["body"])
        return kw["body"]

    def read_namespaced_job_status(self, name: str, ns: str) -> Any:
        if name not in self.jobs:
            raise ApiError(404)
        return NS(status=self.status)

    def list_namespaced_pod(self, ns: str, label_selector: str) -> Any:
        return NS(items=self.pods)

    def read_namespaced_pod_log(self, name: str, ns: str, **kw: Any) -> str:
        return self.logs.get(name, "")

    def delete_namespaced_job(self, name: str, ns: str, **kw: Any) -> None:
        self.jobs.pop(name, None)


@pytest.fixture
def rig() -> tuple[KubernetesExecutor, FakeCluster, list[tuple[str, str, dict[str, Any]]]]:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = KubernetesExecutor(
        config=KubernetesExecutorConfig(image="img:1", gang="volcano", gpu_type="a100"),
        batch_api=fake, core_api=fake, custom_api=fake,
        on_event=lambda kind, message, **f: events.append((kind, message, f)))
    return ex, fake, events


def job(workers: int = 1, job_id: str = "job-1") -> JobSpec:
    return JobSpec(job_id=job_id, model_name="churn", framework=Framework.TENSORFLOW,
                   resources=Resources(gpus=2, workers=workers, cpu=2, memory_gib=8))


def pod(name: str, phase: str = "Running", exit_code: int | None = None) -> Any:
    term = NS(exit_code=exit_code, finished_at="2024-01-01T00:00:00Z") if exit_code else None
    cs = NS(name="trainer", state=NS(terminated=term))
    return NS(metadata=NS(name=name), status=NS(phase=phase, container_statuses=[cs]))


def test_it_implements_the_executor_protocol(rig: Any) -> None:
    assert isinstance(rig[0], Executor)


def test_a_gang_job_creates_podgroup_service_and_job_that_validate(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job(workers=4))
    kinds = [validate_object(o)["kind"] for o in fake.created]
    assert kinds == ["PodGroup", "Service", "Job"]
    assert ex.active() == ["job-1"]
    assert events[0][0] == "queued" and events[0][2]["job_id"] == "job-1"


def test_submitting_the_same_job_twice_runs_one_job(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    ex2 = KubernetesExecutor(config=KubernetesExecutorConfig(image="i"), batch_api=fake,
                             core_api=fake, custom_api=fake,
                             on_event=lambda k, m, **f: events.append((k, m, f)))
    ex2.submit(job())  # e.g. a second router or a restarted control plane
    assert len(fake.jobs) == 1
    assert [e[0] for e in events] == ["queued", "duplicate"]


def test_status_transitions_and_new_log_lines_are_mirrored_once(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    fake.status.active = 1
    fake.pods = [pod("p0")]
    fake.logs["p0"] = "2024-01-01T00:00:01Z epoch 1\n2024-01-01T00:00:02Z epoch 2\n"
    assert ex.poll() == []
    fake.logs["p0"] += "2024-01-01T00:00:03Z epoch 3\n"
    fake.status.failed = 1  # the pod crashed once; the Job controller retries it
    assert ex.poll() == []
    fake.status.conditions = [NS(type="Complete", status="True", reason=None, message=None)]
    [outcome] = ex.poll()
    assert (outcome.succeeded, outcome.attempts) == (True, 2)
    assert [(k, m) for k, m, _ in events] == [
        ("queued", "kubernetes job train-job-1 created"),
        ("started", "1 of 1 worker(s) running"),
        ("log", "epoch 1"), ("log", "epoch 2"),
        ("retrying", "worker failed (1 of 4 attempts used); resuming from the last checkpoint"),
        ("log", "epoch 3"),
        ("succeeded", "kubernetes job complete"),
    ]
    assert ex.active() == []


def test_a_permanent_exit_code_fails_the_job_with_its_code(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    fake.pods = [pod("p0", phase="Failed", exit_code=65)]
    fake.status.failed = 1
    fake.status.conditions = [NS(type="Failed", status="True", reason="PodFailurePolicy",
                                 message="exit code 65")]
    [outcome] = ex.poll()
    assert (outcome.succeeded, outcome.exit_code) == (False, 65)
    assert outcome.reason == "PodFailurePolicy: exit code 65"
    assert events[-1][0] == "failed"


def test_api_errors_become_headrace_errors(rig: Any) -> None:
    ex, fake, _ = rig
    fake.fail_with = 503
    with pytest.raises(RetriableError):
        ex.submit(job(job_id="a"))
    fake.fail_with = 403
    with pytest.raises(ConfigError, match="ServiceAccount"):
        ex.submit(job(job_id="b"))


def test_cancel_deletes_the_job(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    assert ex.cancel("job-1") is True and fake.jobs == {}
    assert ex.cancel("job-1") is False
    assert events[-1][0] == "failed"
