"""A training job whose checkpoint write dies: killed mid-write, or the filesystem full.

Tests run as root, where a read-only ``chmod`` does not stop writes; "disk full" is simulated
with ``RLIMIT_FSIZE`` in the job's process (Python ignores SIGXFSZ, so a write past the limit
fails with ``EFBIG`` exactly like a full disk fails with ``ENOSPC``).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headrace.contracts import ModelSpec
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers import checkpoints, jobs
from headrace.trainers.executors.base import ExitCode, is_retriable
from headrace.trainers.job_process import run_job
from tests.faults.harness import figures
from tests.trainers.conftest import REPO, job_env, request

pytestmark = pytest.mark.slow
FSIZE_LIMIT = 8192  # bytes: status.json fits, a 256-unit layer's weights do not


def _half_written(ckdir: Path) -> list[Path]:
    """Checkpoint directories a reader could mistake for complete ones."""
    if not ckdir.is_dir():
        return []
    return [p for p in ckdir.iterdir()
            if p.name.isdigit() and not (p / checkpoints.COMPLETE).is_file()]


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))


@pytest.mark.parametrize("framework", ["mxnet", "tensorflow"])
def test_a_full_filesystem_during_a_checkpoint_fails_the_job_with_a_reason_then_a_retry_succeeds(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        framework: str) -> None:
    spec = ModelSpec(epochs=2, hidden=(256,), batch_size=32, checkpoint_every_steps=3)
    jid, _ = jobs.create_request(dfs, request(demo, spec=spec, framework=framework))
    ckdir = jobs.checkpoints_dir(dfs, jid)
    out = subprocess.run(
        [sys.executable, "-m", "headrace.trainers", "run", jid, "--topic-prefix", topics.prefix],
        cwd=REPO, env=job_env(broker, dfs), capture_output=True, timeout=120,
        preexec_fn=_limit_file_size)
    st = jobs.read_status(dfs, jid)
    figures("fs_full_checkpoint", framework=framework, exit=out.returncode,
            reason=st.reason if st else None, half_written=len(_half_written(ckdir)))
    assert out.returncode == ExitCode.RETRIABLE and is_retriable(out.returncode), \
        out.stderr.decode()[-2000:]
    assert st is not None and st.reason, "no reason recorded"
    assert "File too large" in st.reason or "No space" in st.reason, st.reason
    assert len(st.reason.splitlines()) == 1
    assert not _half_written(ckdir)
    assert checkpoints.latest(ckdir) is None  # nothing complete was ever written

    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK  # the retry
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None and st.attempts == 2
    assert not _half_written(ckdir)
    assert not [p for p in ckdir.iterdir() if p.name.startswith(".tmp-")]


def test_a_job_killed_mid_checkpoint_write_resumes_from_the_last_complete_one(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics) -> None:
    spec = ModelSpec(epochs=40, hidden=(16,), batch_size=8, checkpoint_every_steps=7,
                     patience=40)  # every epoch runs: the step count is checked
    jid, _ = jobs.create_request(dfs, request(demo, spec=spec))
    ckdir = jobs.checkpoints_dir(dfs, jid)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headrace.trainers", "run", jid, "--topic-prefix", topics.prefix],
        cwd=REPO, env=job_env(broker, dfs), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    caught: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if ckdir.is_dir():
                tmp = [e.name for e in os.scandir(ckdir) if e.name.startswith(".tmp-")]
                if tmp and checkpoints.latest(ckdir) is not None:
                    proc.send_signal(signal.SIGKILL)  # a checkpoint is being written right now
                    caught = tmp
                    break
            time.sleep(0.0005)
    finally:
        if proc.poll() is None and not caught:
            proc.kill()
        proc.wait()
    assert caught, "never caught a checkpoint mid-write"
    found = checkpoints.latest(ckdir)
    assert found is not None
    killed_at = found[1]
    left = [p.name for p in ckdir.iterdir() if p.name.startswith(".tmp-")]
    assert not _half_written(ckdir)

    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK
    per_epoch = (240 + 7) // 8  # 300 rows, 20% validation, batches of 8
    st = jobs.read_status(dfs, jid)
    final = checkpoints.latest(ckdir)
    figures("kill_mid_checkpoint", killed_at_step=killed_at.step, tmp_left=len(left),
            final_step=final[1].step if final else None, attempts=st.attempts if st else None)
    assert st is not None and st.attempts == 2 and st.step == 40 * per_epoch
    assert final is not None and final[1].step == 40 * per_epoch
    assert not [p for p in ckdir.iterdir() if p.name.startswith(".tmp-")]
