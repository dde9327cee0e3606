"""The broker lost its data under the control plane (issue 34): the restarted control plane
re-derives its job table from the DFS, runs the request it had consumed but never ran exactly
once, and ``--rebuild-table`` rebuilds the table from the DFS again without running anything.

The test owns its broker (an embedded Tansu, memory only, restarted on the same port), so it
skips against an external Kafka. The control plane is the real one (``tests.trainers.
control_proc``) with the local executor; the job trains a small MXNet model."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobEvent, JobEventKind, JobState, TrainRequested
from headrace.store import versions
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.reading import iter_records, read_events
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers import api, jobs
from tests.fixtures import eventually, http_get
from tests.trainers.conftest import REPO, job_env, stop

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(os.environ.get("HEADRACE_TEST_BOOTSTRAP")),
                       reason="an external Kafka cannot be restarted from a test"),
]
APP = "lossy"


class Controls:
    def __init__(self, broker: EmbeddedBroker, dfs: Path, topics: ControlTopics,
                 logs: Path) -> None:
        self.broker, self.dfs, self.topics, self.logs = broker, dfs, topics, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, **settings: Any) -> subprocess.Popen[bytes]:
        conf = {"root": str(self.dfs), "bootstrap": self.broker.bootstrap,
                "prefix": self.topics.prefix, "app_id": APP, "concurrency": {"mxnet": 1},
                "settings": settings}
        with open(self.log(len(self.procs)), "wb") as log:
            p = subprocess.Popen([sys.executable, "-m", "tests.trainers.control_proc",
                                  json.dumps(conf)], cwd=REPO, stdout=log,
                                 stderr=subprocess.STDOUT,
                                 env=job_env(self.broker.bootstrap, self.dfs))
        self.procs.append(p)
        return p

    def log(self, n: int) -> Path:
        return self.logs / f"control-{n}.log"

    def wait_ready(self, n: int) -> None:
        def ready() -> bool:
            assert self.procs[n].poll() is None, self.log(n).read_text()[-3000:]
            m = re.search(r"probes on port (\d+)", self.log(n).read_text())
            return bool(m) and http_get(int(m.group(1)), "/readyz")[0] == 200

        eventually(ready, timeout_s=90, interval_s=0.5, what=f"control plane {n} ready")


def table(conn: KafkaConnection, topics: ControlTopics) -> dict[str, dict[str, Any]]:
    """The job table as its changelog holds it (the latest row per job)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in iter_records(conn, f"{topics.prefix}-{APP}-jobs-changelog", idle_s=0.5):
        if r.key and r.value:
            rows[json.loads(r.key)] = json.loads(r.value)
    return rows


def events(conn: KafkaConnection, topics: ControlTopics, jid: str) -> list[JobEventKind]:
    return [e.kind for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
            if e.job_id == jid]


def test_a_restarted_control_plane_rebuilds_its_table_and_runs_the_lost_request_once(
        own_broker: EmbeddedBroker, dfs: Path, demo: str, tmp_path: Path) -> None:
    topics = ControlTopics.with_prefix("loss")
    conn = KafkaConnection(bootstrap=own_broker.bootstrap, timeout_s=15.0)
    controls = Controls(own_broker, dfs, topics, tmp_path)
    try:
        first = controls.start()
        controls.wait_ready(0)
        failed = api.build_request(model_name="lost", framework="mxnet",
                                   dataset_uri="datasets/missing.parquet",
                                   idempotency_key="fails-fast")
        jid_failed = api.request_training(conn=conn, request=failed, topics=topics)
        eventually(lambda: table(conn, topics).get(jid_failed, {}).get("state") == "failed",
                   timeout_s=60, interval_s=0.5, what="the failed job in the table")
        # The router consumed a request and recorded it, then died before running it.
        first.send_signal(signal.SIGKILL)
        first.wait()
        lost = api.build_request(model_name="lost", framework="mxnet", dataset_uri=demo,
                                 epochs=1, idempotency_key="consumed-not-run")
        jid_lost, _ = jobs.create_request(dfs, lost)
        jobs.write_status(dfs, jobs.initial_status(jid_lost, lost))
        # The broker (memory only) restarts: every topic, changelog and offset is gone.
        own_broker.stop()
        own_broker.start()

        controls.start()
        controls.wait_ready(1)

        def ran() -> bool:
            st = jobs.read_status(dfs, jid_lost)
            assert st is not None and st.state != JobState.FAILED, st
            return st.state == JobState.SUCCEEDED

        eventually(ran, timeout_s=120, interval_s=0.5, what="the lost request's job")
        rows = eventually(lambda: (t := table(conn, topics)).get(jid_lost, {}).get(
            "state") == "succeeded" and t, timeout_s=30, interval_s=0.5,
            what="the job table re-derived")
        assert rows[jid_failed]["state"] == "failed" and rows[jid_failed]["rebuilt"]
        st = jobs.read_status(dfs, jid_lost)
        assert st is not None and st.attempts == 1
        assert events(conn, topics, jid_lost).count(JobEventKind.STARTED) == 1

        # The same request delivered again: a duplicate, not a second run.
        api.request_training(conn=conn, request=lost, topics=topics)
        eventually(lambda: JobEventKind.DUPLICATE in events(conn, topics, jid_lost),
                   timeout_s=60, interval_s=0.5, what="the redelivery seen as a duplicate")
        assert versions.list_versions(dfs, "lost") == [1]

        # --rebuild-table: the changelogs are deleted and every row comes back from the DFS.
        stop(controls.procs[1])
        before = table(conn, topics)
        assert set(before) == {jid_failed, jid_lost}
        controls.start(control_rebuild_table=True)
        controls.wait_ready(2)
        assert "--rebuild-table: deleted " in controls.log(2).read_text()
        after = eventually(lambda: len(t := table(conn, topics)) == 2 and t, timeout_s=30,
                           interval_s=0.5, what="the rebuilt table")
        assert {k: r["state"] for k, r in after.items()} == {jid_failed: "failed",
                                                            jid_lost: "succeeded"}
        assert versions.list_versions(dfs, "lost") == [1]  # nothing ran again
        requests = read_events(conn, topics.train_requests, TrainRequested, idle_s=0.5)
        assert [r.idempotency_key for r in requests] == ["consumed-not-run"]
    finally:
        for p in controls.procs:
            stop(p)


def test_a_recovery_that_cannot_end_is_one_line_and_rebuild_table_gets_past_it(
        own_broker: EmbeddedBroker, dfs: Path, demo: str, tmp_path: Path) -> None:
    """The jobs changelog reports a high watermark no reader reaches (it ends in a transaction
    marker: faust waits for ever for that offset, as it did for a changelog the broker lost).
    `headrace control` exits 2 with one line saying how to rebuild; with `--rebuild-table` it
    starts, and the job table comes back from the DFS."""
    topics = ControlTopics.with_prefix("stuck")
    conn = KafkaConnection(bootstrap=own_broker.bootstrap, timeout_s=15.0)
    done = api.build_request(model_name="m", framework="mxnet", dataset_uri=demo,
                             idempotency_key="done-before")
    jid, _ = jobs.create_request(dfs, done)
    jobs.write_status(dfs, jobs.initial_status(jid, done).model_copy(update={
        "state": JobState.SUCCEEDED, "attempts": 1, "version": 1}))
    changelog = f"{topics.prefix}-headrace-control-jobs-changelog"
    ensure_topics(conn, [TopicSpec(changelog, 1, "faust table jobs",
                                   {"cleanup.policy": "compact"})])
    p = make_producer(conn, **{"transactional.id": "tx-" + topics.prefix})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(changelog, key=b'"j-gone"', value=b'{"state": "queued"}')
    p.commit_transaction(15)
    env = {**job_env(own_broker.bootstrap, dfs), "HEADRACE_TOPIC_PREFIX": topics.prefix,
           "HEADRACE_CONTROL_RECOVERY_DEADLINE_S": "5"}
    cli = [sys.executable, "-c", "import sys; from headrace.cli import main; "
           "sys.exit(main(sys.argv[1:]))", "control"]
    stuck = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)
    assert stuck.returncode == 2, stuck.stderr[-3000:]
    said = [ln for ln in stuck.stderr.splitlines() if "--rebuild-table" in ln]
    assert len(said) == 1, stuck.stderr[-3000:]
    assert said[0] == stuck.stderr.strip().splitlines()[-1]  # the last word
    assert f"{changelog} (high watermark 2, its readable records end at offset 0)" in said[0]

    log = tmp_path / "rebuild.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cli, "--rebuild-table"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            m = re.search(r"probes on port (\d+)", log.read_text())
            return bool(m) and http_get(int(m.group(1)), "/readyz")[0] == 200

        eventually(ready, timeout_s=90, interval_s=0.5, what="the rebuilt control plane ready")
        rows: dict[str, dict[str, Any]] = {}
        for r in iter_records(conn, changelog, idle_s=0.5):
            if r.key and r.value:
                rows[json.loads(r.key)] = json.loads(r.value)
        assert {k: v["state"] for k, v in rows.items()} == {jid: "succeeded"}
    finally:
        stop(proc)
