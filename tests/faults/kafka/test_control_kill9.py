"""The control plane (``headrace control``: faust, a real group coordinator, replicated
changelogs) SIGKILLed mid-job on Apache Kafka and started again: faust recovers the job table
from its changelog, and the request consumed before the kill ends as one job with one version;
the same request delivered again is a duplicate."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobEvent, JobEventKind, JobState
from headrace.store import versions
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.reading import iter_records, read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import api, jobs
from tests.faults.harness import figures
from tests.fixtures import eventually, http_get
from tests.trainers.conftest import REPO, job_env
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
CLI = [sys.executable, "-c", "import sys; from headrace.cli import main; "
       "sys.exit(main(sys.argv[1:]))", "control"]


def table(conn: KafkaConnection, changelog: str) -> dict[str, dict[str, Any]]:
    """The job table as its changelog holds it (the latest row per job)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in iter_records(conn, changelog, idle_s=0.5):
        if r.key and r.value:
            rows[json.loads(r.key)] = json.loads(r.value)
    return rows


def kinds(conn: KafkaConnection, topics: ControlTopics, jid: str) -> list[JobEventKind]:
    return [e.kind for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
            if e.job_id == jid and e.kind != JobEventKind.LOG]


def test_a_control_plane_sigkilled_mid_job_recovers_its_table_and_runs_the_job_once(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, dfs: Path, demo: str,
        tmp_path: Path) -> None:
    t0 = time.monotonic()
    topics = ControlTopics.with_prefix("k" + uuid.uuid4().hex[:10])
    ensure_topics(conn, topics.specs())
    changelog = f"{topics.prefix}-headrace-control-jobs-changelog"
    env = {**job_env(kafka_cluster.bootstrap, dfs), "HEADRACE_TOPIC_PREFIX": topics.prefix}
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"control-{len(procs)}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen(CLI, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(p)

        def ready() -> bool:
            assert p.poll() is None, log.read_text()[-3000:]
            m = re.search(r"probes on port (\d+)", log.read_text())
            return m is not None and http_get(int(m.group(1)), "/readyz")[0] == 200

        eventually(ready, timeout_s=120, interval_s=0.5, what=f"control plane {len(procs)}")
        return p

    try:
        first = start()
        # Long enough (patience = epochs: no early stop) to be running at the kill.
        req = api.build_request(model_name="kk", framework="mxnet", dataset_uri=demo,
                                epochs=40, idempotency_key="killed-mid-job")
        req = req.model_copy(update={"spec": req.spec.model_copy(update={"patience": 40})})
        jid = api.request_training(conn=conn, request=req, topics=topics)
        eventually(lambda: table(conn, changelog).get(jid, {}).get("state") == "running",
                   timeout_s=120, interval_s=0.5, what="the running job in the changelog")
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = time.monotonic()
        start()
        restart_ready_s = time.monotonic() - killed_at

        def done() -> bool:
            st = jobs.read_status(dfs, jid)
            assert st is None or st.state != JobState.FAILED, st
            return st is not None and st.state == JobState.SUCCEEDED

        eventually(done, timeout_s=240, interval_s=0.5, what="the job to succeed")
        eventually(lambda: table(conn, changelog).get(jid, {}).get("state") == "succeeded",
                   timeout_s=60, interval_s=0.5, what="the succeeded row in the changelog")
        rows = table(conn, changelog)
        # The row came back from the changelog, not re-derived from the DFS (D9's fallback).
        assert not rows[jid].get("rebuilt"), rows[jid]
        dups = kinds(conn, topics, jid).count(JobEventKind.DUPLICATE)
        api.request_training(conn=conn, request=req, topics=topics)
        eventually(lambda: kinds(conn, topics, jid).count(JobEventKind.DUPLICATE) > dups,
                   timeout_s=60, interval_s=0.5, what="the redelivery a duplicate")
        ks = kinds(conn, topics, jid)
        st = jobs.read_status(dfs, jid)
        assert st is not None
        figures("kafka_control_kill9", events=",".join(k.value for k in ks),
                attempts=st.attempts, version=st.version,
                restart_ready_s=round(restart_ready_s, 1),
                test_s=round(time.monotonic() - t0, 1))
        assert list(rows) == [jid]
        assert ks.count(JobEventKind.QUEUED) == 1, ks
        assert ks.count(JobEventKind.SUCCEEDED) == 1 and JobEventKind.FAILED not in ks, ks
        assert versions.list_versions(dfs, "kk") == [1] and st.version == 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
