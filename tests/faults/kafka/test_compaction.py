"""Compaction for real: the control plane's job table changelog (``cleanup.policy=compact``) with a
short ``segment.ms`` and a low ``min.cleanable.dirty.ratio``, so Apache Kafka's log cleaner
really removes the superseded rows (Tansu never compacts). A control plane started afterwards
recovers its whole table from the compacted log: no row has to be re-derived from the DFS,
every redelivered request is a duplicate, nothing runs again."""

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
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers import api, jobs
from tests.faults.harness import figures
from tests.faults.kafka.control_cli import ControlPlanes
from tests.faults.kafka.control_cli import kinds as job_kinds
from tests.fixtures import eventually
from tests.trainers.conftest import job_env
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
FAILING = 6
COMPACT_SOON = {"cleanup.policy": "compact", "segment.ms": "200",
                "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                "delete.retention.ms": "1000"}


def changelog_records(conn: KafkaConnection, topic: str) -> list[tuple[int, str, Any]]:
    return [(r.offset, json.loads(r.key), json.loads(r.value) if r.value else None)
            for r in iter_records(conn, topic, idle_s=0.5) if r.key]


def test_a_control_plane_recovers_its_whole_table_from_a_log_the_cleaner_compacted(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, dfs: Path, demo: str,
        tmp_path: Path) -> None:
    t0 = time.monotonic()
    topics = ControlTopics.with_prefix("c" + uuid.uuid4().hex[:10])
    ensure_topics(conn, topics.specs())
    changelog = f"{topics.prefix}-headrace-control-jobs-changelog"
    ensure_topics(conn, [TopicSpec(changelog, 1, "faust table jobs", COMPACT_SOON)])
    env = {**job_env(kafka_cluster.bootstrap, dfs), "HEADRACE_TOPIC_PREFIX": topics.prefix}
    controls = ControlPlanes(env, tmp_path)

    def kinds(jid: str) -> list[JobEventKind]:
        return job_kinds(conn, topics, jid)

    try:
        first = controls.start()
        reqs = [api.build_request(model_name="cc", framework="mxnet", dataset_uri=demo,
                                  epochs=1, idempotency_key="compacted-ok")]
        reqs += [api.build_request(model_name="cc", framework="mxnet",
                                   dataset_uri="datasets/missing.parquet",
                                   idempotency_key=f"compacted-fails-{i}")
                 for i in range(FAILING)]
        jids = []
        for r in reqs:  # spread over segments (200 ms each)
            jids.append(api.request_training(conn=conn, request=r, topics=topics))
            time.sleep(0.3)

        def final() -> bool:
            sts = [jobs.read_status(dfs, j) for j in jids]
            return all(st is not None and st.state in (JobState.SUCCEEDED, JobState.FAILED)
                       for st in sts)

        eventually(final, timeout_s=180, interval_s=0.5, what="every job ended")
        want = {j: str(jobs.read_status(dfs, j).state.value)  # type: ignore[union-attr]
                for j in jids}
        eventually(lambda: {k: v["state"] for _, k, v in changelog_records(conn, changelog)
                            if v} == want, timeout_s=60, interval_s=0.5,
                   what="every job's final row in the changelog")
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
        t_clean = time.monotonic()

        def compacted() -> list[tuple[int, str, Any]]:
            # Offsets the cleaner removed: the changelog is not transactional (no markers), so
            # every gap below the last offset (in the active segment, never cleaned) is one.
            now = changelog_records(conn, changelog)
            return now if now[-1][0] + 1 - len(now) >= FAILING else []

        after = eventually(compacted, timeout_s=90, interval_s=1.0,
                           what="the log cleaner to remove superseded rows")
        cleaned_s = time.monotonic() - t_clean
        written = after[-1][0] + 1
        # The control plane that matters starts on the compacted log.
        controls.start()
        dups = {j: kinds(j).count(JobEventKind.DUPLICATE) for j in jids}
        started = {j: kinds(j).count(JobEventKind.STARTED) for j in jids}
        for r in reqs:
            api.request_training(conn=conn, request=r, topics=topics)
        eventually(lambda: all(kinds(j).count(JobEventKind.DUPLICATE) > dups[j] for j in jids),
                   timeout_s=90, interval_s=1.0, what="every redelivery a duplicate")
        keys = [k for _, k, _ in after]
        figures("kafka_compaction", rows_written=written, rows_kept=len(after),
                keys=len(set(keys)), cleaned_s=round(cleaned_s, 1),
                test_s=round(time.monotonic() - t0, 1))
        log = controls.last_log()
        assert "re-derived from the DFS" not in log, log[-3000:]
        assert {j: kinds(j).count(JobEventKind.STARTED) for j in jids} == started
        assert versions.list_versions(dfs, "cc") == [1]
        assert {k: v["state"] for _, k, v in after if v} == want
        assert set(keys) == set(jids)
    finally:
        controls.stop_all()
