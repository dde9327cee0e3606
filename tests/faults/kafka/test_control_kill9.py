"""The control plane (``headrace control``: faust, a real group coordinator, replicated
changelogs) SIGKILLed mid-job on Apache Kafka and started again: faust recovers the job table
from its changelog, and the request consumed before the kill ends as one job with one version;
the same request delivered again is a duplicate."""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobEventKind, JobState
from headrace.store import versions
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.reading import iter_records
from headrace.streams.topics import ControlTopics
from headrace.trainers import api, jobs
from tests.faults.harness import figures
from tests.faults.kafka.control_cli import ControlPlanes, kinds
from tests.fixtures import eventually
from tests.trainers.conftest import job_env
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


def table(conn: KafkaConnection, changelog: str) -> dict[str, dict[str, Any]]:
    """The job table as its changelog holds it (the latest row per job)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in iter_records(conn, changelog, idle_s=0.5):
        if r.key and r.value:
            rows[json.loads(r.key)] = json.loads(r.value)
    return rows


def test_a_control_plane_sigkilled_mid_job_recovers_its_table_and_runs_the_job_once(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, dfs: Path, demo: str,
        tmp_path: Path) -> None:
    t0 = time.monotonic()
    topics = ControlTopics.with_prefix("k" + uuid.uuid4().hex[:10])
    ensure_topics(conn, topics.specs())
    changelog = f"{topics.prefix}-headrace-control-jobs-changelog"
    env = {**job_env(kafka_cluster.bootstrap, dfs), "HEADRACE_TOPIC_PREFIX": topics.prefix}
    controls = ControlPlanes(env, tmp_path)
    try:
        first = controls.start()
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
        controls.start()
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
        controls.stop_all()
