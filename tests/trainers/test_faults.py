"""Faults: a job killed mid-training resumes from its last complete checkpoint and its step
never goes back; a crash at any step of a publish leaves no visible partial version."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from headrace.contracts import JobEventKind, ModelSpec
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers import checkpoints, jobs
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.fixtures import eventually
from tests.trainers.conftest import REPO, TINY, job_env, request, wait_events


@pytest.mark.slow
def test_a_job_killed_mid_epoch_resumes_from_its_last_checkpoint_and_never_steps_back(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics
) -> None:
    spec = ModelSpec(epochs=40, hidden=(16,), batch_size=8, checkpoint_every_steps=7,
                     patience=40)  # every epoch runs: the step count is checked
    jid, _ = jobs.create_request(dfs, request(demo, spec=spec))
    ckdir = jobs.checkpoints_dir(dfs, jid)
    cmd = [sys.executable, "-m", "headrace.trainers", "run", jid, "--topic-prefix",
           topics.prefix]
    proc = subprocess.Popen(cmd, cwd=REPO, env=job_env(broker, dfs),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    eventually(lambda: (f := checkpoints.latest(ckdir)) is not None and f[1].step >= 100,
               timeout_s=90, what="a checkpoint at step 100")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    found = checkpoints.latest(ckdir)
    assert found is not None
    killed_at = found[1]
    assert killed_at.step < 40 * 30, "the job finished before it could be killed"

    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK

    events = wait_events(conn, topics.jobs, lambda evs: any(e.kind == "succeeded" for e in evs))
    logs = [e.message for e in events if e.kind == JobEventKind.LOG and e.attempt == 2]
    assert f"resumed from checkpoint at step {killed_at.step} " \
           f"(epoch {killed_at.epoch}, batch {killed_at.batch})" in logs
    steps = [e.step for e in events if e.kind == JobEventKind.PROGRESS and e.step is not None]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # never back, no repeats
    second = [e.step for e in events if e.kind == JobEventKind.PROGRESS and e.attempt == 2]
    assert second and min(s for s in second if s is not None) > killed_at.step
    per_epoch = (240 + 7) // 8  # 300 rows, 20% validation, batches of 8
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.step == 40 * per_epoch and st.attempts == 2
    final = checkpoints.latest(ckdir)
    assert final is not None and final[1].step == 40 * per_epoch
    assert not [p for p in ckdir.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("step", ["files-written", "files-hashed", "manifest-written"])
def test_a_crash_at_each_publish_step_leaves_no_visible_version(dfs: Path, demo: str,
                                                                step: str) -> None:
    jid, _ = jobs.create_request(dfs, request(demo, spec=TINY))

    def crash(at: str) -> None:
        if at == step:
            raise OSError(f"simulated crash at {at}")

    assert run_job(root=dfs, job_id=jid, conn=None, publish_hook=crash) == ExitCode.RETRIABLE
    assert versions.list_versions(dfs, "demo") == []
    assert versions.read_alias(dfs, "demo") is None
    # The retry publishes version 1, complete.
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    assert versions.list_versions(dfs, "demo") == [1]
    versions.resolve(dfs, "demo@production")


def test_a_failed_publish_of_a_job_run_by_hand_leaves_status_failed_with_the_reason(
        dfs: Path, demo: str) -> None:
    # No executor (run by hand, `headrace job run`): nobody else writes the final state.
    jid, _ = jobs.create_request(dfs, request(demo, spec=TINY))

    def crash(at: str) -> None:
        if at == "files-hashed":
            raise OSError("simulated crash at files-hashed")

    assert run_job(root=dfs, job_id=jid, conn=None, publish_hook=crash) == ExitCode.RETRIABLE
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == "failed" and st.attempts == 1, st
    assert st.reason == "publishing demo failed on the DFS: simulated crash at files-hashed"
    assert st.exit_code == ExitCode.RETRIABLE and st.finished_at is not None
    # Under an executor the same failure is not final: the control plane retries it.
    assert run_job(root=dfs, job_id=jid, conn=None, publish_hook=crash, attempt=2,
                   supervised=True) == ExitCode.RETRIABLE
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == "running" and st.attempts == 2, st
    # A rerun by hand finishes it.
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == "succeeded" and st.attempts == 3 and st.reason is None


@pytest.mark.slow
@pytest.mark.parametrize("step", ["files-written", "manifest-written", "renamed"])
def test_a_process_exiting_hard_mid_publish_leaves_no_partial_version(
        broker: str, dfs: Path, demo: str, step: str) -> None:
    jid, _ = jobs.create_request(dfs, request(demo, spec=TINY))
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from headrace.trainers.job_process import run_job
        def hook(at):
            if at == {step!r}:
                os._exit(137)
        run_job(root=Path({str(dfs)!r}), job_id={jid!r}, conn=None, publish_hook=hook)
    """)
    rc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=job_env(broker, dfs),
                        capture_output=True, timeout=120).returncode
    assert rc == 137
    visible = versions.list_versions(dfs, "demo")
    if step == "renamed":  # renamed = complete; the alias was not moved yet
        assert visible == [1]
        versions.load_version(dfs, "demo", 1)
        assert versions.read_alias(dfs, "demo") is None
    else:
        assert visible == []
    # A new attempt finishes the job without a second version.
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    assert versions.list_versions(dfs, "demo") == [1]
    assert versions.read_alias(dfs, "demo").version == 1  # type: ignore[union-attr]
