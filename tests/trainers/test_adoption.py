"""A control plane SIGKILLed while a local MXNet gang trains: its members run in their own
sessions and outlive it. The restarted control plane finds the gang's process groups in its
job table, kills them before starting anything (a process it did not start cannot be
supervised), and resumes the job from its last checkpoint: the job ends in exactly one final
state with one version, and no process of the gang is left. And the order the control plane
follows after a restart: adopt what it can, reap the rest, only then start anything."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobEvent, JobEventKind, JobState, ModelPublished, Resources
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.reading import iter_records, read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import checkpoints, jobs
from headrace.trainers.control.plane import ControlPlane
from headrace.trainers.executors.base import JobOutcome
from tests.fixtures import eventually
from tests.trainers.conftest import request, wait_events
from tests.trainers.recording_executor import RecordingAdopter


def gang_pids(job_id: str) -> set[int]:
    """Every live process whose environment names the job (what the executor sets)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if f"HEADRACE_JOB_ID={job_id}".encode() in environ and \
                stat.rsplit(")", 1)[-1].split()[0] != "Z":
            found.add(int(entry))
    return found


@pytest.mark.slow
def test_a_control_plane_killed_mid_gang_ends_the_job_once_with_no_gang_left(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Callable[..., subprocess.Popen[bytes]]) -> None:
    start = start_control
    first = start(app_id="adopt")
    # Long enough (about 30 s) that the gang still runs when the next control plane is ready
    # (the dead one's group session must expire first): the reaping path is what is tested.
    # patience = epochs: early stopping would end the job in ~2 s, before the restart.
    spec = request(demo).spec.model_copy(update={"epochs": 250, "batch_size": 16,
                                                 "checkpoint_every_steps": 25,
                                                 "hidden": (16,), "patience": 250})
    req = request(demo, key="adopt-1", framework="mxnet", spec=spec).model_copy(
        update={"resources": Resources(workers=2, servers=1)})
    send_events(conn, topics.train_requests, [req])
    jid = jobs.job_id_for("adopt-1")
    ckdir = jobs.checkpoints_dir(dfs, jid)

    def mid_gang() -> bool:
        found = checkpoints.latest(ckdir)
        return found is not None and found[1].step >= 50 and len(gang_pids(jid)) == 4
    eventually(mid_gang, timeout_s=180, interval_s=0.2, what="a checkpoint mid-gang")
    # The gang's handle is in the job table's changelog (what the next control plane reads).
    changelog = f"{topics.prefix}-adopt-jobs-changelog"

    def handle_recorded() -> bool:
        return any(jid.encode() in (r.key or b"") and b'"pgids"' in (r.value or b"")
                   for r in iter_records(conn, changelog, idle_s=0.3))
    eventually(handle_recorded, timeout_s=30, what="the gang's handle in the job table")
    orphans = gang_pids(jid)
    first.send_signal(signal.SIGKILL)
    first.wait()
    time.sleep(1.0)
    assert gang_pids(jid) & orphans, "the gang outlives its control plane (own sessions)"

    start(app_id="adopt")
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == jid and e.kind in (JobEventKind.SUCCEEDED, JobEventKind.FAILED)
        for e in evs), timeout=300)
    eventually(lambda: not gang_pids(jid), timeout_s=30, what="no process of the gang left")
    time.sleep(2.0)  # late writers (an orphan that survived) would show up here
    log = jobs.log_path(dfs, jid).read_text()
    assert events
    finals = [e.kind for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
              if e.job_id == jid and e.kind in (JobEventKind.SUCCEEDED, JobEventKind.FAILED)]
    assert finals == [JobEventKind.SUCCEEDED], (finals, log[-3000:])
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state.value == "succeeded", log[-3000:]
    assert versions.list_versions(dfs, req.model_name) == [1]
    assert len([m for m in read_events(conn, topics.models, ModelPublished)
                if m.model_name == req.model_name]) == 1
    # The orphans were killed before the new gang started: the resumed attempt's log is the
    # only one after the restart, and it resumed from a checkpoint.
    assert "resumed from checkpoint" in log.split("--- attempt")[-1], log[-3000:]


def test_after_a_restart_what_cannot_be_adopted_is_reaped_before_anything_starts(
        conn: KafkaConnection, dfs: Path, demo: str) -> None:
    ex = RecordingAdopter()
    plane = ControlPlane(root=dfs, conn=conn, executor=ex)
    table: dict[str, Any] = {}
    ids = []
    for key, kind, state in (("a", "local", "running"), ("b", "kubernetes", "running"),
                             ("c", "local", "queued")):
        req = request(demo, key=f"restart-{key}")
        jid, _ = jobs.create_request(dfs, req)
        jobs.write_status(dfs, jobs.initial_status(jid, req))
        table[jid] = {"state": state, "handle": {"kind": kind, "attempt": 1, "pgids": []}}
        ids.append(jid)
    plane.on_ready(table)
    a, b, c = ids
    assert ex.calls == [("adopt", a), ("reap", a), ("adopt", b), ("adopt", c), ("reap", c),
                        ("submit", a), ("submit", c)]  # b adopted: not started again

    # A job that already wrote "succeeded" is not rewritten as failed (written once).
    jobs.update_status(dfs, a, state=JobState.SUCCEEDED, finished_at=jobs.now_iso())
    plane._ended(JobOutcome(a, False, 1, 1, "lock held"), table)
    st = jobs.read_status(dfs, a)
    assert st is not None and st.state == JobState.SUCCEEDED and st.reason is None
    assert table[a]["state"] == "succeeded"
