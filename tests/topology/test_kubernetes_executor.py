from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from headrace.contracts import Framework, Resources
from headrace.topology.validation import validate_object
from headrace.trainers.executors.base import Executor, JobSpec
from headrace.trainers.executors.kubernetes import KubernetesExecutor, KubernetesExecutorConfig
from tests.kube_fake import FakeKube, pod

FakeCluster = FakeKube


@pytest.fixture
def rig() -> tuple[KubernetesExecutor, FakeCluster, list[tuple[str, str, dict[str, Any]]]]:
    fake = FakeCluster()
    events: list[tuple[str, str, dict[str, Any]]] = []
    ex = KubernetesExecutor(
        config=KubernetesExecutorConfig(image="img:1", gang="volcano", gpu_type="a100"),
        batch_api=fake, core_api=fake, custom_api=fake, networking_api=fake,
        on_event=lambda kind, message, **f: events.append((kind, message, f)), backoff_s=0)
    return ex, fake, events


def job(workers: int = 1, job_id: str = "job-1") -> JobSpec:
    return JobSpec(job_id=job_id, model_name="churn", framework=Framework.TENSORFLOW,
                   resources=Resources(gpus=2, workers=workers, cpu=2, memory_gib=8))


def test_it_implements_the_executor_protocol(rig: Any) -> None:
    assert isinstance(rig[0], Executor)


def test_a_gang_job_creates_podgroup_service_and_job_that_validate(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job(workers=4))
    kinds = [validate_object(o)["kind"] for o in fake.created]
    # The owner first (suspended), then what it owns, then it is let go.
    assert kinds == ["Job", "PodGroup", "Service", "NetworkPolicy"]
    owner = fake.objects[("Job", "train-job-1-worker-0")]
    for kind in ("PodGroup", "Service", "NetworkPolicy"):
        [ref] = fake.objects[(kind, "train-job-1")]["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"]) == ("Job", owner["metadata"]["uid"])
    assert owner["spec"]["suspend"] is False and owner["spec"]["activeDeadlineSeconds"] > 0
    assert ("patch", "Job", "train-job-1-worker-0") in fake.requests
    assert ex.active() == ["job-1"]
    assert ex.cancel("job-1")  # deleting the owner deletes the whole attempt
    assert fake.objects == {}
    assert events[0][0] == "queued" and events[0][2]["job_id"] == "job-1"


def test_submitting_the_same_job_twice_runs_one_job(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    ex2 = KubernetesExecutor(config=KubernetesExecutorConfig(image="i"), batch_api=fake,
                             core_api=fake, custom_api=fake, networking_api=fake,
                             on_event=lambda k, m, **f: events.append((k, m, f)))
    ex2.submit(job())  # e.g. a second router or a restarted control plane
    assert len(fake.jobs) == 1
    assert [e[0] for e in events] == ["queued", "duplicate"]


def test_status_transitions_come_from_one_watch_and_logs_are_read_only_on_demand(
        rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    fake.status.active = 1
    fake.pods = [pod("p0", node="gpu-1")]
    fake.logs["p0"] = "2024-01-01T00:00:01Z epoch 1\n2024-01-01T00:00:02Z epoch 2\n"
    assert ex.poll() == []
    fake.status.failed = 1  # the pod crashed once; the Job controller retries it
    assert ex.poll() == []
    assert ex.logs("job-1") == ["epoch 1", "epoch 2"]  # `jobs logs`: read when asked
    fake.status.conditions = [NS(type="Complete", status="True", reason=None, message=None)]
    [outcome] = ex.poll()
    assert (outcome.succeeded, outcome.attempts) == (True, 2)
    assert [(k, m) for k, m, _ in events] == [
        ("queued", "kubernetes job train-job-1 created"),
        ("started", "1 of 1 worker(s) running on gpu-1"),
        ("retrying", "worker failed (1 of 4 attempts used); resuming from the last checkpoint"),
        ("succeeded", "kubernetes job complete"),
    ]
    assert ex.active() == []
    # One list, then one watch per pass: no per-job status reads, no logs but the one asked
    # for; the pods are listed once when they start (where they run) and for those logs.
    assert fake.count("get", "Job") == 0 and fake.count("list", "Job") == 1
    assert fake.count("watch", "Job") == 3
    assert fake.count("log") == 1 and fake.count("list", "Pod") == 2


def test_a_failed_jobs_pod_logs_are_mirrored_once_it_fails(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    fake.pods = [pod("p0", phase="Failed", exit_code=1)]
    fake.logs["p0"] = "2024-01-01T00:00:01Z Traceback: boom\n"
    fake.status.failed = 4
    fake.status.conditions = [NS(type="Failed", status="True", reason="BackoffLimitExceeded",
                                 message="")]
    [outcome] = ex.poll()
    assert not outcome.succeeded
    assert ("log", "Traceback: boom") in [(k, m) for k, m, _ in events]


def test_an_expired_watch_lists_again_and_misses_nothing(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    assert ex.poll() == []
    fake.expire()  # the API server compacted its history: 410 Gone
    fake.status.active = 1
    assert ex.poll() == []  # the watch answered 410: listed again
    assert fake.count("list", "Job") == 2
    fake.status.conditions = [NS(type="Complete", status="True", reason=None, message=None)]
    [outcome] = ex.poll()
    assert outcome.succeeded
    assert [k for k, _, _ in events] == ["queued", "started", "succeeded"]


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


def test_one_503_on_create_does_not_fail_the_job(rig: Any) -> None:
    ex, fake, events = rig
    fake.fail_next[("create", "Job")] = [503]
    ex.submit(job(job_id="a"))
    assert fake.names("Job") == ["train-a"]  # retried at once (backoff), created once
    assert [k for k, _, _ in events] == ["queued"]
    assert fake.count("create", "Job") == 2 and ex.active() == ["a"]


def test_an_api_down_for_longer_leaves_the_job_waiting_not_failed(rig: Any) -> None:
    ex, fake, events = rig
    fake.fail_with = 503
    ex.submit(job(job_id="a"))  # every try answered 503
    assert ex.poll() == [] and ex.active() == ["a"] and events == []
    fake.fail_with = None
    assert ex.poll() == []
    assert fake.names("Job") == ["train-a"] and [k for k, _, _ in events] == ["queued"]


def test_a_refusing_api_fails_the_job_in_one_line(rig: Any) -> None:
    ex, fake, events = rig
    fake.fail_with = 403
    ex.submit(job(job_id="b"))
    [outcome] = ex.poll()
    assert not outcome.succeeded and "ServiceAccount" in outcome.reason
    assert "\n" not in outcome.reason and events[-1][0] == "failed"


def test_cancel_deletes_the_job(rig: Any) -> None:
    ex, fake, events = rig
    ex.submit(job())
    assert ex.cancel("job-1") is True and fake.jobs == {}
    assert ex.cancel("job-1") is False
    assert events[-1][0] == "failed"


def test_the_gang_network_policy_goes_through_the_retrying_idempotent_create(rig: Any) -> None:
    ex, fake, events = rig
    fake.fail_next[("create", "NetworkPolicy")] = [503]
    ex.submit(job(workers=2, job_id="g"))
    assert fake.count("create", "NetworkPolicy") == 2  # retried after the 503
    pol = validate_object(fake.bodies[("NetworkPolicy", "train-g")])
    owner = fake.objects[("Job", "train-g-worker-0")]
    assert pol["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert [k for k, _, _ in events] == ["queued"] and ex.active() == ["g"]
    assert ex.cancel("g") and fake.objects == {}  # deleted with its attempt
    # A create answered 409 (a control plane restarted mid-create) is "already there".
    fake.fail_next[("create", "NetworkPolicy")] = [409]
    ex.submit(job(workers=2, job_id="h"))
    assert events[-1][0] == "queued" and ex.active() == ["h"]
    assert fake.objects[("Job", "train-h-worker-0")]["spec"]["suspend"] is False
