"""The control plane after its table lost rows (issue 34): the job table is re-derived from
the DFS, a consumed request that never ran runs once, and a recovery that cannot end is said
in one line with how to rebuild.

Unit tests (a recording executor, an injected clock); the end-to-end run with the embedded
broker restarted under the control plane is ``tests/faults/test_control_broker_loss.py``."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobState, TrainRequested
from headrace.core.errors import RecordRef
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers import api, jobs
from headrace.trainers.control import ControlPlane
from headrace.trainers.control.rebuild import reconcile
from headrace.trainers.control.recovery import (
    Changelog,
    RecoveryWatch,
    probe,
    reset_changelogs,
    verdict,
)
from tests.trainers.recording_executor import RecordingExecutor


def request(key: str, demo: str) -> TrainRequested:
    return api.build_request(model_name="m", framework="mxnet", dataset_uri=demo,
                             idempotency_key=key)


def job(dfs: Path, key: str, demo: str, **status: Any) -> str:
    """A job as a router leaves it on the DFS; ``status=None``: request.json only."""
    req = request(key, demo)
    jid, _ = jobs.create_request(dfs, req)
    if status.get("state") is not None:
        jobs.write_status(dfs, jobs.initial_status(jid, req).model_copy(update=status))
    return jid


@pytest.fixture
def dfs_jobs(dfs: Path, demo: str) -> dict[str, str]:
    return {
        "succeeded": job(dfs, "a", demo, state=JobState.SUCCEEDED, attempts=1, version=1,
                         started_at="2026-01-01T00:00:00+00:00"),
        "failed": job(dfs, "b", demo, state=JobState.FAILED, attempts=1, reason="boom"),
        # Consumed and recorded, then the router's producer died: it never ran.
        "never_ran": job(dfs, "c", demo, state=JobState.QUEUED, attempts=0),
        # request.json written, then the router was killed: no status, the claim is free.
        "no_status": job(dfs, "d", demo, state=None),
        "running": job(dfs, "e", demo, state=JobState.RUNNING, attempts=1,
                       started_at="2026-01-01T00:00:00+00:00"),
    }


def plane(dfs: Path, conn: KafkaConnection, topics: ControlTopics) -> tuple[ControlPlane,
                                                                             RecordingExecutor]:
    ex = RecordingExecutor()
    return ControlPlane(root=dfs, conn=conn, executor=ex, topics=topics), ex


def test_an_empty_table_is_re_derived_and_the_jobs_that_never_ran_run_once(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics,
        dfs_jobs: dict[str, str]) -> None:
    table: dict[str, Any] = {}
    done = reconcile(dfs, table)
    j = dfs_jobs
    assert sorted(done.added) == sorted([j["succeeded"], j["failed"], j["never_ran"],
                                         j["no_status"]])
    assert sorted(done.requeued) == sorted([j["never_ran"], j["no_status"]])
    assert done.left == [j["running"]]  # another control plane may be running it
    assert {k: r["state"] for k, r in table.items()} == {
        j["succeeded"]: "succeeded", j["failed"]: "failed", j["never_ran"]: "queued",
        j["no_status"]: "queued"}
    assert table[j["failed"]]["reason"] == "boom" and table[j["succeeded"]]["version"] == 1
    st = jobs.read_status(dfs, j["no_status"])
    assert st is not None and st.state == JobState.QUEUED  # recorded, as its router would
    p, ex = plane(dfs, conn, topics)
    try:
        p.on_ready(table)
        assert sorted(ex.submitted) == sorted([j["never_ran"], j["no_status"]])
        # The same request delivered again (its topic replayed): still one job.
        req = jobs.read_request(dfs, j["never_ran"])
        ref = RecordRef(topic=topics.train_requests, partition=0, offset=9,
                        value=req.model_dump_json().encode())
        assert p.on_request(ref, table) is None
        assert sorted(ex.submitted) == sorted([j["never_ran"], j["no_status"]])
        # Another start with the table intact: nothing is added, nothing runs twice.
        assert reconcile(dfs, table).added == []
    finally:
        p.close()


def test_a_full_rebuild_rewrites_every_row_and_resumes_the_running_jobs_too(
        dfs: Path, conn: KafkaConnection, topics: ControlTopics,
        dfs_jobs: dict[str, str]) -> None:
    j = dfs_jobs
    handle = {"pid": 1}
    table: dict[str, Any] = {j["running"]: {"state": "queued", "handle": handle},
                             j["succeeded"]: {"state": "running"}}
    done = reconcile(dfs, table, full=True)
    assert sorted(done.added) == sorted(j.values()) and done.left == []
    assert table[j["succeeded"]]["state"] == "succeeded"  # the DFS wins over a stale row
    assert table[j["running"]]["state"] == "running"
    assert table[j["running"]]["handle"] == handle  # where it runs: adopt or reap it
    p, ex = plane(dfs, conn, topics)
    try:
        p.on_ready(table)
        assert sorted(ex.submitted) == sorted([j["never_ran"], j["no_status"], j["running"]])
    finally:
        p.close()


def test_a_row_the_table_kept_is_not_touched(dfs: Path, dfs_jobs: dict[str, str]) -> None:
    row = {"state": "queued", "owned": False}
    table: dict[str, Any] = {dfs_jobs["never_ran"]: row}
    reconcile(dfs, table)
    assert table[dfs_jobs["never_ran"]] is row


def test_a_job_another_live_router_owns_is_not_resumed_by_a_router_starting_beside_it(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics) -> None:
    """D56: router B, started while router A held an accepted job queued, rebuilt its table
    from the DFS and ran the job too (A's run hit the job's lock and was retried)."""
    a, ex_a = plane(dfs, conn, topics)
    b, ex_b = plane(dfs, conn, topics)  # its own owner locks: another router, to flock
    try:
        req = request("owned", demo)
        ref = RecordRef(topic=topics.train_requests, partition=0, offset=0,
                        value=req.model_dump_json().encode())
        table_a: dict[str, Any] = {}
        jid = a.on_request(ref, table_a)
        assert jid is not None and ex_a.submitted == [jid]  # queued in A's executor
        table_b: dict[str, Any] = {}
        assert reconcile(dfs, table_b).requeued == [jid]  # B sees a job that never ran
        b.on_ready(table_b)
        assert ex_b.submitted == [] and table_b[jid]["owned"] is False
        # The same request delivered to B: a duplicate, not a second run.
        assert b.on_request(ref, table_b) is None and ex_b.submitted == []
        # A stops (the kernel frees what it owned): a router starting now resumes the job.
        a.owned.close()
        c, ex_c = plane(dfs, conn, topics)
        try:
            table_c: dict[str, Any] = {}
            reconcile(dfs, table_c)
            c.on_ready(table_c)
            assert ex_c.submitted == [jid]
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_a_router_recording_the_job_right_now_is_left_to_it(dfs: Path, demo: str) -> None:
    jid = job(dfs, "busy", demo, state=None)
    table: dict[str, Any] = {}
    with jobs.claim(dfs, jid) as mine:
        assert mine
        assert reconcile(dfs, table).added == []
    assert table == {} and jobs.read_status(dfs, jid) is None


# -- a recovery that cannot end ------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_changelog_with_records_nobody_can_read_is_said_in_one_line_after_the_deadline(
        ) -> None:
    clock, looked, stuck = Clock(), threading.Event(), []
    logs = [Changelog("p-headrace-control-jobs-changelog", 2, 0),
            Changelog("p-headrace-control-rule-counters-changelog", 0, 0),
            Changelog("p-headrace-control-drift-episodes-changelog", 3, 2, 2),
            Changelog("p.events.schedules", 4, 4, 4)]

    def look() -> list[Changelog]:
        looked.set()
        return logs

    watch = RecoveryWatch(deadline_s=60, look=look, on_stuck=stuck.append, clock=clock)
    for t in (0, 30, 59.9):
        clock.t = t
        watch.waiting()
    assert not looked.is_set()
    clock.t = 61
    watch.waiting()
    watch.waiting()  # once
    watch.join(5)
    assert len(stuck) == 1 and watch.stuck_line == stuck[0]
    line = stuck[0]
    assert "\n" not in line
    assert ("p-headrace-control-jobs-changelog (high watermark 2, no readable record)"
            in line)
    assert ("p-headrace-control-drift-episodes-changelog (high watermark 3, its readable "
            "records end at offset 1)" in line)  # a transaction marker at 2
    assert "rule-counters" not in line and "schedules" not in line  # empty, or complete
    assert "`headrace control --rebuild-table`" in line and "61s" in line


def test_a_slow_recovery_with_readable_records_is_logged_and_left_to_go_on(
        caplog: pytest.LogCaptureFixture) -> None:
    stuck, line = verdict([Changelog("c", 5000, 1200, 5000)], 130)  # compacted: all there
    assert not stuck and "c 1200/5000" in line
    clock, calls = Clock(), []
    watch = RecoveryWatch(deadline_s=1, look=lambda: [Changelog("c", 5, 5, 5)],
                          on_stuck=calls.append, clock=clock)
    watch.waiting()  # recovery starts at 0
    clock.t = 2
    with caplog.at_level(logging.WARNING):
        watch.waiting()
        watch.join(5)
    assert calls == [] and watch.stuck_line is None
    assert [r.getMessage() for r in caplog.records if "still running" in r.getMessage()]


def test_probe_counts_what_a_reader_gets_and_reset_empties_the_changelogs(
        conn: KafkaConnection, topics: ControlTopics) -> None:
    names = [f"{topics.prefix}-app-jobs-changelog", f"{topics.prefix}-app-empty-changelog"]
    ensure_topics(conn, [TopicSpec(n, 1, "t", {"cleanup.policy": "compact"}) for n in names])
    p = make_producer(conn)
    for k in (b"j1", b"j2"):  # a batch each: Tansu's high watermark after a batch is low
        p.produce(names[0], key=k, value=b'{"state": "queued"}')
        assert p.flush(15) == 0
    assert probe(conn, names, idle_s=0.5) == [Changelog(names[0], 2, 2, 2),
                                             Changelog(names[1], 0, 0, 0)]
    reset_changelogs(conn, names)
    ensure_topics(conn, [TopicSpec(n, 1, "t", {"cleanup.policy": "compact"}) for n in names])
    assert probe(conn, names, idle_s=0.5) == [Changelog(n, 0, 0) for n in names]
