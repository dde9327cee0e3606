"""Gangs seen from their first second: status.json says running (with its attempt) from the
launch, and a gang whose parameter server is frozen (SIGSTOP) before the first step is stopped
at its start-up deadline, restarted, and failed with the reason once its attempts are spent --
on events.jobs and in status.json. (A member frozen mid-training: test_distributed.py.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from headrace.contracts import JobEventKind, JobState, ModelSpec, Resources
from headrace.core.errors import RecordRef
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.control.plane import ControlPlane
from headrace.trainers.executors.local import LocalExecutor
from tests.fixtures import eventually
from tests.trainers.conftest import request, wait_events

SPEC = ModelSpec(epochs=1, hidden=(8,), batch_size=32)


@pytest.mark.slow
def test_a_server_frozen_in_start_up_is_running_at_once_then_restarted_then_failed(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics) -> None:
    ex = LocalExecutor(root=dfs, bootstrap=conn.bootstrap, topic_prefix=topics.prefix,
                       max_attempts=2, backoff_s=0.1, watchdog_s=600, startup_s=4)
    plane = ControlPlane(root=dfs, conn=conn, executor=ex, topics=topics)
    ex.on_start, ex.on_retry = plane.on_start, plane.on_retry
    req = request(demo, spec=SPEC).model_copy(
        update={"resources": Resources(workers=2, servers=1)})
    table: dict[str, object] = {}
    frozen: list[int] = []
    jid: str | None = None
    try:
        jid = plane.on_request(RecordRef(topics.train_requests, 0, 0,
                                         value=req.model_dump_json().encode()), table)
        assert jid is not None
        for attempt in (1, 2):
            pid = eventually(lambda: (plane.on_tick(table), ex.pids_of(jid).get("s0"))[1],
                             timeout_s=30, what=f"attempt {attempt}'s server")
            os.kill(pid, signal.SIGSTOP)  # frozen before any worker could step
            frozen.append(pid)
            # Running from the launch, with its attempt, while no member has stepped.
            st = jobs.read_status(dfs, jid)
            assert st is not None and st.state == JobState.RUNNING, st
            assert st.attempts == attempt and st.started_at is not None
            t0 = time.monotonic()
            while ex.pids_of(jid).get("s0") == pid:
                plane.on_tick(table)
                time.sleep(0.1)
                assert time.monotonic() - t0 < 30, "the start-up deadline never fired"
            assert time.monotonic() - t0 < 4 + 5  # the deadline, plus a poll and the kill
        eventually(lambda: (plane.on_tick(table), not ex.active())[1], timeout_s=30,
                   what="the job's end")
    finally:
        plane.close()
        for pid in frozen:  # SIGKILLed with their gang; nothing left stopped
            assert not _alive(pid)
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == JobState.FAILED and st.attempts == 2, st
    assert st.reason is not None and st.reason.startswith(
        "no first training step within 4s of the start (start-up deadline)"), st.reason
    assert st.reason.endswith("(gave up after 2 attempts)")
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == jid and e.kind == JobEventKind.FAILED for e in evs))
    mine = [e for e in events if e.job_id == jid and e.kind != JobEventKind.LOG]
    assert [(e.kind, e.attempt) for e in mine] == [
        (JobEventKind.QUEUED, 1), (JobEventKind.STARTED, 1), (JobEventKind.RETRYING, 2),
        (JobEventKind.STARTED, 2), (JobEventKind.FAILED, 2)], mine
    assert mine[2].reason is not None and "start-up deadline" in mine[2].reason
    assert mine[-1].reason == st.reason
    log = jobs.log_path(dfs, jid).read_text()
    assert log.count("watchdog: no first training step within 4s") == 2, log[-3000:]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
