"""Live matrices survive a kill -9: a scorer process killed mid-run and restarted ends with
counts equal to an offline recount of every record, each counted once (the records it had
published but not committed are delivered again and must not be counted twice)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from headrace.core.settings import Settings
from headrace.ops.rollout.control import start_shadow
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.topics import ControlTopics, shadow_topic
from tests.scorers.conftest import eventually, publish_tf, read_topic, rows, send_json
from tests.scorers.shadow_helpers import live_counts, matrix, offline_labels, summed
from tests.scorers.test_process_faults import _committed, _spawn

pytestmark = pytest.mark.slow


def test_live_matrix_after_kill_9_and_restart_equals_the_offline_recount(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream, seed=0)
    publish_tf(dfs, stream, seed=3, alias=False)
    topics = ControlTopics.of(settings)
    start_shadow(root=dfs, conn=conn, ref=f"{stream}:2", topics=topics)
    n = 12_000
    send_json(conn, data, rows(n))  # a backlog: the scorer is busy, a batch always in flight
    env = {"HEADRACE_SCORER_STREAM": stream, "HEADRACE_SCORER_PARTITIONS": "0,1,2",
           "HEADRACE_SCORER_HTTP_PORT": "0", "HEADRACE_SCORER_BATCH_SIZE": "100",
           "HEADRACE_SCORER_DEVICE": "cpu",
           "HEADRACE_SCORER_SHADOW_BUDGET_MS": "5000"}  # counting, not the budget
    first = _spawn(settings, cli=False, **env)
    try:
        eventually(lambda: partition_count(conn, shadow_topic(stream)), timeout_s=90,
                   what="the shadow topic")
        read_topic(conn, shadow_topic(stream), expect=500, settle_s=0, timeout_s=90)
        # Kill it where next_offset matters: a batch's counts published, its offsets not yet
        # committed (freeze the process, look, let it go on until that moment comes).
        for _ in range(100):
            first.send_signal(signal.SIGSTOP)
            if _counted_past_commit(conn, topics, stream, data):
                break
            first.send_signal(signal.SIGCONT)
            time.sleep(0.02)
        else:
            pytest.fail("never caught a batch counted but not committed")
        first.kill()  # SIGKILL: no flush, no commit, no last snapshot
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    at_kill = summed(live_counts(conn, topics, stream))["rows"]
    assert 0 < at_kill < n, "the kill came too late to be mid-stream"
    second = _spawn(settings, cli=False, **env)
    try:
        eventually(lambda: summed(live_counts(conn, topics, stream))["rows"] >= n,
                   timeout_s=90, what="every record compared")
    finally:
        second.send_signal(signal.SIGTERM)
        out, _ = second.communicate(timeout=30)
    assert second.returncode == 0, out.decode()[-2000:]
    got = summed(live_counts(conn, topics, stream))
    a = offline_labels(dfs, f"{stream}:1", conn, stream)
    b = offline_labels(dfs, f"{stream}:2", conn, stream)
    assert len(a) == n
    assert got["rows"] == n and got["candidate_errors"] == 0
    assert got["matrix"] == matrix(got["classes"], a, b)


def _counted_past_commit(conn: KafkaConnection, topics: ControlTopics, stream: str,
                         data: str) -> bool:
    committed = _committed(conn, stream, data)
    return any(lc.next_offset > committed.get(p, 0)
               for p, lc in live_counts(conn, topics, stream).items())
