"""Cancel, end to end: the control plane (faust app + local executor) on the real broker gets
``CancelRequested`` records on its request topic. A running job's process group is stopped and
the job ends CANCELLED once, with who asked and why, and nothing published; a queued job never
starts; a finished job is refused (by the CLI in one line, and by the control plane); a control
plane that claimed a cancel and died before recording it records it after its restart, once;
the attempt count survives a restart. And the rule between a cancel and a publish racing for
the job's end (``trainers.cancelling``)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import (
    CancelRequested,
    JobEvent,
    JobEventKind,
    JobState,
    ModelPublished,
    TrainRequested,
)
from headrace.core.errors import PermanentError, RecordRef
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import send_events
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import api, cancelling, jobs
from headrace.trainers.control.plane import ControlPlane, row_of
from headrace.trainers.executors.local import LocalExecutor
from tests.fixtures import eventually
from tests.trainers.conftest import request, wait_events
from tests.trainers.recording_executor import RecordingExecutor
from tests.trainers.test_adoption import gang_pids

Start = Callable[..., subprocess.Popen[bytes]]
FINAL = (JobEventKind.SUCCEEDED, JobEventKind.FAILED, JobEventKind.CANCELLED)


def _long(demo: str, key: str) -> object:
    spec = request(demo).spec.model_copy(update={"epochs": 400, "batch_size": 16,
                                                 "hidden": (16,), "patience": 400})
    return request(demo, key=key, framework="mxnet", spec=spec)


def _kinds(events: list[JobEvent], jid: str) -> list[JobEventKind]:
    return [e.kind for e in events if e.job_id == jid and e.kind != JobEventKind.LOG]


@pytest.mark.slow
def test_cancel_stops_a_running_job_a_queued_one_never_starts_a_finished_one_is_refused(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start, capsys: pytest.CaptureFixture[str]) -> None:
    start_control(app_id="cancel")
    done = request(demo, key="cancel-done")  # a short job, to be finished first
    send_events(conn, topics.train_requests, [done])
    done_id = jobs.job_id_for("cancel-done")
    wait_events(conn, topics.jobs, lambda evs: JobEventKind.SUCCEEDED in _kinds(evs, done_id),
                timeout=180)
    # A finished job: the CLI refuses in one line; sent anyway, the control plane refuses too.
    rc = main(["--dfs-root", str(dfs), "--bootstrap", conn.bootstrap, "jobs", "cancel",
               done_id, "--topic-prefix", topics.prefix])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "already succeeded" in err[0], err
    send_events(conn, topics.train_requests,
                [CancelRequested(job_id=done_id, requested_by="bob", reason="late")],
                key_of=lambda e: e.job_id)

    # One long job runs (mxnet runs one at a time here); the second waits in the executor.
    send_events(conn, topics.train_requests, [_long(demo, "cancel-run"),
                                              _long(demo, "cancel-queued")])
    run_id, queued_id = jobs.job_id_for("cancel-run"), jobs.job_id_for("cancel-queued")
    wait_events(conn, topics.jobs, lambda evs: JobEventKind.STARTED in _kinds(evs, run_id)
                and JobEventKind.QUEUED in _kinds(evs, queued_id), timeout=120)
    eventually(lambda: bool(gang_pids(run_id)), timeout_s=30, what="the job's process")
    api.request_cancel(conn=conn, root=dfs, job_id=queued_id, requested_by="alice",
                       reason="not needed", topics=topics)
    wait_events(conn, topics.jobs,
                lambda evs: JobEventKind.CANCELLED in _kinds(evs, queued_id), timeout=60)
    api.request_cancel(conn=conn, root=dfs, job_id=run_id, requested_by="alice",
                       reason="wrong dataset", topics=topics)
    events = wait_events(conn, topics.jobs,
                         lambda evs: JobEventKind.CANCELLED in _kinds(evs, run_id), timeout=60)
    time.sleep(3.0)  # room for a late second final state or a start of the queued job
    events = read_events(conn, topics.jobs, JobEvent, idle_s=0.5)

    run = [e for e in events if e.job_id == run_id and e.kind in FINAL]
    assert [(e.kind, e.reason) for e in run] == [
        (JobEventKind.CANCELLED, "cancelled by alice: wrong dataset")]
    queued = _kinds(events, queued_id)
    assert queued == [JobEventKind.QUEUED, JobEventKind.CANCELLED], queued  # never started
    refused = [e for e in events if e.job_id == done_id and e.kind == JobEventKind.DUPLICATE]
    assert [e.reason for e in refused] == ["cancel refused: the job already succeeded"]
    assert [e.kind for e in events if e.job_id == done_id and e.kind in FINAL] == [
        JobEventKind.SUCCEEDED]
    for jid, why in ((run_id, "wrong dataset"), (queued_id, "not needed")):
        st = jobs.read_status(dfs, jid)
        assert st is not None and st.state == JobState.CANCELLED
        assert st.reason == f"cancelled by alice: {why}" and st.version is None
    assert not gang_pids(run_id), "the cancelled job's processes still run"
    published = read_events(conn, topics.models, ModelPublished)
    assert [m.job_id for m in published] == [done_id]  # nothing of the cancelled jobs
    assert [p.name for p in (dfs / "models" / "demo").iterdir() if p.name.isdigit()] == ["1"]
    with pytest.raises(PermanentError, match="already cancelled"):
        api.request_cancel(conn=conn, root=dfs, job_id=run_id, requested_by="alice",
                           topics=topics)


@pytest.mark.slow
def test_a_cancel_claimed_before_a_control_plane_died_is_recorded_once_after_its_restart(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start) -> None:
    first = start_control(app_id="cancel-restart")
    send_events(conn, topics.train_requests, [_long(demo, "cancel-restart")])
    jid = jobs.job_id_for("cancel-restart")
    wait_events(conn, topics.jobs, lambda evs: JobEventKind.STARTED in _kinds(evs, jid),
                timeout=120)
    eventually(lambda: bool(gang_pids(jid)), timeout_s=30, what="the job's process")
    # The cancel's claim is on the DFS, then the control plane dies before it stops the job
    # or records anything: its successor must finish the cancel, never resume the job.
    won = cancelling.claim(dfs, jid, cancelling.Claim(cancelling.CANCEL, "carol", "restart",
                                                      "ev-1"))
    assert won.by == cancelling.CANCEL
    first.send_signal(signal.SIGKILL)
    first.wait()
    start_control(app_id="cancel-restart")
    wait_events(conn, topics.jobs, lambda evs: JobEventKind.CANCELLED in _kinds(evs, jid),
                timeout=120)
    eventually(lambda: not gang_pids(jid), timeout_s=30, what="the job's processes gone")
    time.sleep(3.0)
    events = read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
    final = [(e.kind, e.reason) for e in events if e.job_id == jid and e.kind in FINAL]
    assert final == [(JobEventKind.CANCELLED, "cancelled by carol: restart")], final
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == JobState.CANCELLED and st.version is None


def test_the_first_claim_on_a_jobs_end_wins(dfs: Path, demo: str) -> None:
    """A publish claimed first refuses a later cancel; a cancel claimed first stops the
    publish; a retry of the publisher finds its own claim."""
    published, cancelled = request(demo, key="claim-p"), request(demo, key="claim-c")
    for req in (published, cancelled):
        jobs.create_request(dfs, req)
    pub, can = jobs.job_id_for("claim-p"), jobs.job_id_for("claim-c")
    cancel = cancelling.Claim(cancelling.CANCEL, "dan", "why", "ev")
    assert cancelling.claim(dfs, pub, cancelling.Claim(cancelling.PUBLISH)).by == "publish"
    assert cancelling.claim(dfs, pub, cancel).by == "publish"
    assert cancelling.claim(dfs, pub, cancelling.Claim(cancelling.PUBLISH)).by == "publish"
    assert cancelling.claim(dfs, can, cancel) == cancel
    assert cancelling.claim(dfs, can, cancelling.Claim(cancelling.PUBLISH)) == cancel
    assert cancel.line() == "cancelled by dan: why"


def test_a_resumed_job_counts_the_attempts_made_before_the_restart(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics) -> None:
    """Before: a job resumed after a control-plane restart started again at attempt 1 (its
    log said ``--- attempt 1 ---``), so its retry budget started over."""
    req = request(demo, key="attempts-survive")
    jid, _ = jobs.create_request(dfs, req)
    jobs.write_status(dfs, jobs.initial_status(jid, req).model_copy(
        update={"state": JobState.RUNNING, "attempts": 2}))
    executor = LocalExecutor(root=dfs, bootstrap=conn.bootstrap,
                             topic_prefix=topics.prefix, max_attempts=3)
    plane = ControlPlane(root=dfs, conn=conn, executor=executor, topics=topics)
    table = {jid: row_of(JobState.RUNNING, req)}
    try:
        plane.on_ready(table)
        st = jobs.read_status(dfs, jid)
        assert st is not None and st.attempts == 3
        assert "--- attempt 3 ---" in jobs.log_path(dfs, jid).read_text()
        assert "--- attempt 1 ---" not in jobs.log_path(dfs, jid).read_text()
    finally:
        plane.close()


def test_a_cancelled_study_asks_no_new_trial_and_cancels_its_running_ones(
        dfs: Path, conn: KafkaConnection, topics: ControlTopics) -> None:
    """``tune cancel``: the running trial's job gets a CancelRequested; once the control plane
    has ended it (CANCELLED, written here as it would), the study's runner ends with it failed
    and asks nothing more, though 5 trials were wanted; a second cancel is refused."""
    from headrace.trainers.tuning import storage
    from headrace.trainers.tuning.space import parse_space
    from headrace.trainers.tuning.study import cancel_study, run_study, trial_request
    from tests.trainers.test_tuning import config

    c = storage.write_config(dfs, config())
    study, space = storage.load_study(dfs, c), parse_space(c.space)
    ids = []
    for state in (JobState.SUCCEEDED, JobState.RUNNING):
        t = study.ask(space.distributions)
        req = trial_request(c, space, t.number, t.params)
        jid, _ = jobs.create_request(dfs, req)
        t.set_user_attr("job_id", jid)
        jobs.write_status(dfs, jobs.initial_status(jid, req).model_copy(
            update={"state": state, "metrics": {"loss": 0.3}, "version": 1}))
        ids.append(jid)
        if state == JobState.SUCCEEDED:
            study.tell(t.number, 0.3)
    assert cancel_study(root=dfs, conn=conn, name="st", requested_by="erin", reason="enough",
                        topics=topics) == [ids[1]]
    sent = read_events(conn, topics.train_requests, CancelRequested, idle_s=0.5)
    assert [(e.job_id, e.requested_by, e.reason) for e in sent] == [(ids[1], "erin", "enough")]
    jobs.update_status(dfs, ids[1], state=JobState.CANCELLED, reason="cancelled by erin: enough")
    result = run_study(root=dfs, conn=conn, config=c, trials=5, topics=topics, poll_s=0.05)
    assert [(r.number, r.state) for r in result.trials] == [(0, "complete"), (1, "fail")]
    assert read_events(conn, topics.train_requests, TrainRequested, idle_s=0.5) == []
    with pytest.raises(PermanentError, match="already cancelled"):
        cancel_study(root=dfs, conn=conn, name="st", requested_by="erin", topics=topics)


class _Recorder(RecordingExecutor):
    def cancel(self, job_id: str) -> bool:
        self.calls.append(("cancel", job_id))
        return True


def _as_record(topics: ControlTopics, event: CancelRequested) -> RecordRef:
    return RecordRef(topic=topics.train_requests, partition=0, offset=0,
                     key=event.job_id.encode(), value=event.to_bytes(),
                     headers=tuple(hdr.contract_headers(event.SCHEMA, event.schema_version)))


def test_a_cancel_meeting_a_publish_is_refused_and_a_redelivered_cancel_ends_a_job_once(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics) -> None:
    """The race with a finish: a job whose chief claimed the publish is not cancelled (it ends
    as it would have); a cancel delivered twice stops the job once and records one final
    state (the second is answered DUPLICATE)."""
    ensure_topics(conn, topics.specs())
    ids = []
    for key in ("race-publishing", "race-running"):
        req = request(demo, key=key)
        jid, _ = jobs.create_request(dfs, req)
        jobs.write_status(dfs, jobs.initial_status(jid, req).model_copy(
            update={"state": JobState.RUNNING, "attempts": 1}))
        ids.append(jid)
    publishing, running = ids
    cancelling.claim(dfs, publishing, cancelling.Claim(cancelling.PUBLISH))
    executor = _Recorder()
    plane = ControlPlane(root=dfs, conn=conn, executor=executor, topics=topics)
    table: dict[str, object] = {}
    try:
        plane.on_request(_as_record(topics, CancelRequested(
            job_id=publishing, requested_by="frank", reason="too late")), table)
        twice = CancelRequested(job_id=running, requested_by="grace", reason="twice")
        plane.on_request(_as_record(topics, twice), table)
        plane.on_request(_as_record(topics, twice), table)  # redelivered
    finally:
        plane.close()
    events = read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
    pub = [(e.kind, e.reason) for e in events if e.job_id == publishing]
    assert pub == [(JobEventKind.DUPLICATE, "cancel refused: the job is publishing its model")]
    st = jobs.read_status(dfs, publishing)
    assert st is not None and st.state == JobState.RUNNING
    run = [(e.kind, e.reason) for e in events if e.job_id == running]
    assert run == [(JobEventKind.CANCELLED, "cancelled by grace: twice"),
                   (JobEventKind.DUPLICATE, "cancel refused: the job already cancelled")], run
    assert executor.calls == [("cancel", running)]
