"""The control plane (faust app + local executor) against the real broker: exactly one job
per idempotency key, bad input dead-lettered or failed fast, schedules once per slot."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from headrace.contracts import JobEvent, JobEventKind, ModelPublished, TrainRequested
from headrace.streams import dlq
from headrace.streams.clients import KafkaConnection, make_producer
from headrace.streams.producing import send_events
from headrace.streams.reading import iter_records, read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from tests.fixtures import eventually
from tests.trainers.conftest import request, stop, wait_events

pytestmark = pytest.mark.slow
Start = Callable[..., subprocess.Popen[bytes]]


def test_one_job_per_key_bad_input_dead_lettered_or_failed_fast(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start) -> None:
    start_control()
    good = request(demo, key="order-42")
    missing = request("datasets/missing.parquet", key="order-43")
    send_events(conn, topics.train_requests, [good, good, good, missing])
    p = make_producer(conn)
    p.produce(topics.train_requests, value=b"{not json")
    p.produce(topics.train_requests,
              value=good.model_dump_json().replace('"mxnet"', '"caffe"').encode())
    p.flush(10)

    jid = jobs.job_id_for("order-42")
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == jid and e.kind in ("succeeded", "failed") for e in evs), timeout=120)
    mine = [e.kind for e in events if e.job_id == jid and e.kind != JobEventKind.LOG]
    assert mine.count(JobEventKind.QUEUED) == 1 and mine.count(JobEventKind.DUPLICATE) == 2
    assert mine.count(JobEventKind.STARTED) == 1 and mine[-1] == JobEventKind.SUCCEEDED, mine
    assert sorted(p.name for p in (dfs / "jobs").iterdir()) == sorted(
        [jid, jobs.job_id_for("order-43")])
    published = read_events(conn, topics.models, ModelPublished)
    assert [(m.model_name, m.version, m.job_id) for m in published] == [("demo", 1, jid)]

    bad = [e for e in events if e.job_id == jobs.job_id_for("order-43")]
    assert [e.kind for e in bad] == [JobEventKind.QUEUED, JobEventKind.FAILED]
    assert bad[1].reason == "dataset 'datasets/missing.parquet' does not exist under the DFS root"
    st = jobs.read_status(dfs, jobs.job_id_for("order-43"))
    assert st is not None and st.state == "failed" and st.attempts == 0

    letters = list(iter_records(conn, topics.train_requests_dlq, idle_s=1.0))
    assert letters[0].value == b"{not json"
    assert len(letters) == 2
    h = letters[1]
    assert h.header(dlq.DLQ_TOPIC) == topics.train_requests
    assert h.header(dlq.DLQ_OFFSET) == "5" and h.header(dlq.DLQ_STAGE) == "parse"
    assert h.header(dlq.DLQ_ERROR_CLASS) == "ValidationFailed"
    assert "framework" in (h.header(dlq.DLQ_ERROR_MESSAGE) or "")


def test_two_control_planes_run_one_job_for_a_request_delivered_three_times(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start) -> None:
    # Different app ids: two routers that do not share a consumer group or a table.
    start_control(app_id="router-a")
    start_control(app_id="router-b")
    req = request(demo, key="dup-1", spec=request(demo).spec.model_copy(update={"epochs": 1}))
    send_events(conn, topics.train_requests, [req, req, req])
    jid = jobs.job_id_for("dup-1")
    events = wait_events(conn, topics.jobs, lambda evs: sum(
        e.kind == "duplicate" for e in evs) >= 5 and any(e.kind == "succeeded" for e in evs),
        timeout=120)
    kinds = [e.kind for e in events if e.job_id == jid and e.kind != JobEventKind.LOG]
    assert kinds.count(JobEventKind.QUEUED) == 1, kinds
    assert kinds.count(JobEventKind.STARTED) == 1 and kinds.count(JobEventKind.DUPLICATE) == 5
    assert [p.name for p in (dfs / "jobs").iterdir()] == [jid]
    assert len(read_events(conn, topics.models, ModelPublished)) == 1


def _set_now(path: Path, iso: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(iso)
    tmp.replace(path)  # atomic: the control plane never reads a half-written time


def _scheduled(conn: KafkaConnection, topics: ControlTopics) -> list[TrainRequested]:
    return [r for r in read_events(conn, topics.train_requests, TrainRequested)
            if r.trigger.kind == "schedule"]


def _ticked_at(clock_log: Path, iso: str, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the control plane has run two more schedules ticks at ``iso`` (the second
    read of the clock means the first tick has finished): whatever a tick at this time would
    fire has been fired by then, however late the process started."""
    want = datetime.fromisoformat(iso).isoformat()

    def reads() -> int:
        return (clock_log.read_text().splitlines().count(want) if clock_log.exists() else 0)

    target = reads() + 2

    def ticked() -> bool:
        assert proc.poll() is None, "the control plane exited"
        return reads() >= target

    eventually(ticked, timeout_s=90, interval_s=0.1, what=f"a schedules tick at {iso}")


def _slot_recorded(conn: KafkaConnection, topics: ControlTopics, slot: bytes) -> bool:
    return any(slot in (r.value or b"") for r in iter_records(conn, topics.schedules, idle_s=0.5))


def test_a_schedule_fires_once_per_slot_across_restarts(
        conn: KafkaConnection, dfs: Path, topics: ControlTopics, start_control: Start,
        tmp_path: Path) -> None:
    now = tmp_path / "now"
    clock_log = tmp_path / "clock.log"
    trig = tmp_path / "triggers.yaml"
    trig.write_text(
        "schedules:\n"
        "  - name: nightly\n    cron: '* * * * *'\n"
        "    request: {model_name: demo, framework: mxnet, dataset_uri: missing.parquet}\n")
    cfg = {"now_file": str(now), "triggers": str(trig), "app_id": "sched",
           "clock_log": str(clock_log)}
    _set_now(now, "2030-01-01T10:00:30+00:00")
    first = start_control(**cfg)
    _ticked_at(clock_log, "2030-01-01T10:00:30+00:00", first)
    assert _scheduled(conn, topics) == []  # a new schedule waits for the next slot
    _set_now(now, "2030-01-01T10:01:05+00:00")
    eventually(lambda: len(_scheduled(conn, topics)) == 1, what="the 10:01 slot fired")
    # The fired slot is in the table's changelog before the process is stopped.
    eventually(lambda: _slot_recorded(conn, topics, b"10:01:00"), what="the 10:01 slot recorded")
    stop(first)

    _set_now(now, "2030-01-01T10:01:40+00:00")  # same slot after a restart: nothing
    second = start_control(**cfg)
    _ticked_at(clock_log, "2030-01-01T10:01:40+00:00", second)
    assert len(_scheduled(conn, topics)) == 1
    _set_now(now, "2030-01-01T10:02:00Z")
    eventually(lambda: len(_scheduled(conn, topics)) == 2, what="the 10:02 slot fired")
    _ticked_at(clock_log, "2030-01-01T10:02:00+00:00", second)  # no second fire
    reqs = _scheduled(conn, topics)
    assert [r.idempotency_key for r in reqs] == [
        "schedule:nightly:2030-01-01T10:01:00Z",
        "schedule:nightly:2030-01-01T10:02:00Z"]
    assert [r.trigger.slot for r in reqs] == ["2030-01-01T10:01:00Z",
                                               "2030-01-01T10:02:00Z"]
    # The last slot is on the compacted schedules topic.
    last = list(iter_records(conn, topics.schedules, idle_s=1.0))
    assert last and b"10:02:00" in (last[-1].value or b"")


def test_an_event_rule_requests_training_every_n_records(
        conn: KafkaConnection, dfs: Path, topics: ControlTopics, tmp_path: Path) -> None:
    from headrace.trainers.control import ControlPlane
    from headrace.trainers.control.triggers import load_triggers
    from headrace.trainers.executors.local import LocalExecutor

    trig = tmp_path / "t.yaml"
    trig.write_text("rules:\n  - name: fresh\n    stream: demo\n    every: 100\n"
                    "    request: {model_name: demo, framework: mxnet, dataset_uri: d.parquet}\n")
    plane = ControlPlane(root=dfs, conn=conn, executor=LocalExecutor(root=dfs), topics=topics,
                         triggers=load_triggers(trig))
    counters: dict[str, object] = {}
    for n in (60, 60, 130):  # 250 records: windows 1 and 2 complete, 50 carried over
        plane.on_data("demo", n, counters)
    plane.on_data("other", 500, counters)
    plane.close()
    reqs = read_events(conn, topics.train_requests, TrainRequested)
    assert [(r.idempotency_key, r.trigger.kind, r.trigger.slot) for r in reqs] == [
        ("rule:fresh:1", "event", "1"), ("rule:fresh:2", "event", "2")]
    assert counters == {"fresh": {"count": 50, "window": 2}}


def test_requests_over_a_cap_or_naming_bad_code_are_dead_lettered_and_start_nothing(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start) -> None:
    from headrace.contracts import CodeRef, ModelSpec, Resources
    from headrace.store import code
    from tests.trainers.conftest import REPO, TINY

    cv = code.push(dfs, REPO / "examples" / "model_code", "tabular-net")
    start_control()
    refused = [
        request(demo, key="layers", spec=TINY.model_copy(update={"hidden": (16384,) * 50})),
        request(demo, key="gpus").model_copy(update={"resources": Resources(gpus=64)}),
        request(demo, key="workers").model_copy(update={"resources": Resources(workers=256)}),
        request(demo, key="unknown", spec=ModelSpec(model=CodeRef(
            code="nobody@0123456789ab", entrypoint="m:build"))),
        request(demo, key="entry", spec=ModelSpec(model=CodeRef(
            code=cv.ref, entrypoint="tabular_net.keras_model:nope"))),
    ]
    send_events(conn, topics.train_requests, refused)
    eventually(lambda: len(list(iter_records(conn, topics.train_requests_dlq, idle_s=0.5)))
               >= len(refused), timeout_s=90, interval_s=0.5, what="the refused requests' letters")
    letters = list(iter_records(conn, topics.train_requests_dlq, idle_s=0.5))
    assert [h.header(dlq.DLQ_STAGE) for h in letters] == ["admit"] * len(refused)
    assert [h.header(dlq.DLQ_ERROR_MESSAGE) for h in letters] == [
        "spec.hidden: 50 hidden layers is over the cap HEADRACE_MAX_LAYERS=32",
        "resources: 64 GPUs (64 per worker x 1) is over the cap HEADRACE_MAX_GPUS=8",
        "resources.workers: 256 workers is over the cap HEADRACE_MAX_WORKERS=16",
        "code nobody@0123456789ab is not registered (push it with `headrace code push`)",
        "entrypoint tabular_net.keras_model:nope: tabular_net/keras_model.py defines no nope",
    ]
    assert not (dfs / "jobs").exists() or not any((dfs / "jobs").iterdir())
    assert read_events(conn, topics.jobs, JobEvent, idle_s=0.5) == []
