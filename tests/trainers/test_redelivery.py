"""A router killed between a job's ``request.json`` and its status/table row: the redelivered
request must run the job (once), not be called a duplicate of a job nobody runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.contracts import JobEventKind, ModelPublished
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from tests.trainers.conftest import REPO, request, wait_events

Start = Callable[..., subprocess.Popen[bytes]]


def test_a_claim_held_by_a_killed_process_is_free(dfs: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from headrace.trainers import jobs\n"
         "with jobs.claim(Path(sys.argv[1]), 'j-x') as mine:\n"
         "    print(mine, flush=True); time.sleep(60)", str(dfs)],
        cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"True"
        with jobs.claim(dfs, "j-x") as mine:
            assert mine is False  # a live holder keeps it
    finally:
        holder.kill()  # SIGKILL: no cleanup runs in the holder
        holder.wait()
    with jobs.claim(dfs, "j-x") as mine:
        assert mine is True
        with jobs.claim(dfs, "j-x") as again:  # a second open file description, one process
            assert again is False


@pytest.mark.slow
def test_a_request_left_without_a_status_by_a_killed_router_runs_once(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start) -> None:
    req = request(demo, key="crash-window",
                  spec=request(demo).spec.model_copy(update={"epochs": 1}))
    jid = jobs.job_id_for(req.idempotency_key)
    # What a router SIGKILLed right after the exclusive create leaves: request.json, no
    # status.json, no table row, no process, and its claim released by the kernel.
    assert jobs.create_request(dfs, req) == (jid, True)
    assert jobs.read_status(dfs, jid) is None
    start_control()

    # While a live router holds the claim (it is recording the job), a delivery is a duplicate
    # and starts nothing.
    with jobs.claim(dfs, jid) as mine:
        assert mine
        send_events(conn, topics.train_requests, [req])
        wait_events(conn, topics.jobs, lambda evs: any(
            e.job_id == jid and e.kind == JobEventKind.DUPLICATE for e in evs), timeout=60)
        assert jobs.read_status(dfs, jid) is None
    # That router died (the claim is free, still no status): the redelivery runs the job; a
    # later delivery is a duplicate of the running job.
    send_events(conn, topics.train_requests, [req, req])
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == jid and e.kind in (JobEventKind.SUCCEEDED, JobEventKind.FAILED)
        for e in evs) and sum(e.kind == JobEventKind.DUPLICATE for e in evs) >= 2,
        timeout=120)
    kinds = [e.kind for e in events if e.job_id == jid and e.kind != JobEventKind.LOG]
    assert kinds.count(JobEventKind.QUEUED) == 1 and kinds.count(JobEventKind.STARTED) == 1
    assert kinds.count(JobEventKind.DUPLICATE) == 2, kinds
    assert kinds.count(JobEventKind.SUCCEEDED) == 1 and JobEventKind.FAILED not in kinds
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == "succeeded" and st.version == 1
    published = read_events(conn, topics.models, ModelPublished)
    assert [(m.model_name, m.version, m.job_id) for m in published] == [("demo", 1, jid)]
