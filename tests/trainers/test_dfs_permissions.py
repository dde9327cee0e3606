"""A DFS the control plane cannot write (a root-owned ReadWriteMany volume without a matching
fsGroup) fails the request with the reason -- a FAILED job event and a dead letter -- instead of
dropping it silently.

Root ignores file modes (CAP_DAC_OVERRIDE), and these machines run tests as root with the
Python interpreter under /root (unreadable to other users), so the control-plane process runs
as root with CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER dropped from its capability
bounding set before exec (``prctl(PR_CAPBSET_DROP)``): for it, a ``chmod 0555`` DFS root is
as unwritable as it is to uid 10001 in a pod. Run as non-root, the drop is skipped.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.contracts import JobEventKind
from headrace.streams import dlq
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.reading import iter_records
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from tests.trainers.conftest import REPO, job_env, request, stop, wait_events

pytestmark = pytest.mark.slow
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3


def _as_unprivileged() -> None:
    """preexec_fn: a root child loses the capabilities that bypass file permissions."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_unwritable_dfs_fails_the_request_with_permission_denied(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        tmp_path: Path) -> None:
    dfs.chmod(0o555)  # like a root-owned volume root seen by uid 10001
    cfg = {"root": str(dfs), "bootstrap": broker, "prefix": topics.prefix}
    log = open(tmp_path / "control.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "tests.trainers.control_proc",
                             json.dumps(cfg)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            env=job_env(broker, dfs), preexec_fn=_as_unprivileged)
    try:
        req = request(demo, key="ro-dfs-1")
        send_events(conn, topics.train_requests, [req])
        jid = jobs.job_id_for("ro-dfs-1")
        events = wait_events(conn, topics.jobs, lambda evs: any(
            e.job_id == jid and e.kind == JobEventKind.FAILED for e in evs), timeout=120)
    finally:
        stop(proc)
        dfs.chmod(0o755)
    [failed] = [e for e in events if e.job_id == jid]
    denied = f"Permission denied: '{dfs}/jobs'"
    assert failed.kind == JobEventKind.FAILED and failed.request_id == req.event_id
    assert failed.reason is not None and denied in failed.reason
    assert "must be writable by uid" in failed.reason
    [letter] = list(iter_records(conn, topics.train_requests_dlq, idle_s=1.0))
    assert letter.value == req.to_bytes()
    assert letter.header(dlq.DLQ_ERROR_CLASS) == "DfsNotWritable"
    assert denied in (letter.header(dlq.DLQ_ERROR_MESSAGE) or "")
    assert not (dfs / "jobs").exists()


def test_a_job_that_cannot_write_its_checkpoints_fails_at_once_with_the_reason(
        broker: str, dfs: Path, demo: str) -> None:
    req = request(demo, key="ro-ckpt-1")
    jid, created = jobs.create_request(dfs, req)
    assert created
    ckdir = jobs.checkpoints_dir(dfs, jid)
    ckdir.chmod(0o555)  # the job directory is writable, its checkpoints are not
    try:
        proc = subprocess.run([sys.executable, "-m", "headrace.trainers", "run", jid], cwd=REPO,
                              env=job_env(broker, dfs), preexec_fn=_as_unprivileged,
                              capture_output=True, timeout=300)
    finally:
        ckdir.chmod(0o755)
    # Exit 65: permanent, the executor fails the job without retrying (a retry would hit the
    # same wall); the job leaves its reason and code in status.json for it.
    assert proc.returncode == 65
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.exit_code == 65
    assert st.reason is not None and st.reason.startswith("filesystem error: [Errno 13] "
                                                          "Permission denied")
    assert str(ckdir) in st.reason
