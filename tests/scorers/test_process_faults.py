"""The scorer as a real process: SIGTERM and kill -9 (at-least-once across a crash)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from headrace.core.settings import Settings
from headrace.streams.clients import KafkaConnection, make_consumer
from headrace.streams.topics import predictions_topic, scorer_group
from tests.scorers.conftest import eventually, publish_tf, read_topic, rows, send_json

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _spawn(settings: Settings, *args: str, cli: bool, **env: str) -> subprocess.Popen[bytes]:
    full = {**os.environ, "HEADRACE_BOOTSTRAP": str(settings.bootstrap),
            "HEADRACE_DFS_ROOT": str(settings.dfs_root), "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    if cli:
        cmd = [sys.executable, "-c", "from headrace.cli import main; main()", "score", *args]
    else:
        cmd = [sys.executable, "-m", "headrace.scorers"]
    return subprocess.Popen(cmd, env=full, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _committed(conn: KafkaConnection, stream: str, topic: str) -> dict[int, int]:
    c = make_consumer(conn, scorer_group(stream))
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _sources(msgs: list) -> list[tuple[int, int]]:  # type: ignore[type-arg]
    return [(p["source_partition"], p["source_offset"]) for p in
            (json.loads(m.value()) for m in msgs)]


def _input_offsets(conn: KafkaConnection, topic: str, n: int) -> set[tuple[int, int]]:
    return {(m.partition(), m.offset()) for m in read_topic(conn, topic, expect=n, settle_s=0.2)}


def test_sigterm_finishes_the_batch_commits_and_exits_zero_within_grace(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream)
    send_json(conn, data, rows(3000))
    proc = _spawn(settings, stream, "--partitions", "0,1,2", "--http-port", "0",
                  "--batch-size", "128", "--grace-s", "10", cli=True)
    try:
        read_topic(conn, predictions_topic(stream), expect=300, settle_s=0, timeout_s=90)
        send_json(conn, data, rows(2000, seed=5), key_prefix="late")  # keep it busy
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()[-2000:]
    assert took < 10
    committed = _committed(conn, stream, data)
    assert sum(max(o, 0) for o in committed.values()) > 0
    have = set(_sources(read_topic(conn, predictions_topic(stream), expect=1, settle_s=1.0)))
    for p, end in committed.items():  # every committed offset has its prediction
        assert all((p, o) in have for o in range(max(end, 0))), f"partition {p}"


def test_kill_9_mid_batch_then_restart_gives_every_offset_a_prediction(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream)
    n, head = 6000, 1000
    send_json(conn, data, rows(head))
    env = {"HEADRACE_SCORER_STREAM": stream, "HEADRACE_SCORER_PARTITIONS": "0,1,2",
           "HEADRACE_SCORER_HTTP_PORT": "0", "HEADRACE_SCORER_BATCH_SIZE": "200",
           "HEADRACE_SCORER_DEVICE": "cpu"}
    first = _spawn(settings, cli=False, **env)
    # The rest arrives paced (about 2 s) so the kill lands while records are still flowing.
    tail = rows(n - head, seed=3)
    feeder = threading.Thread(target=lambda: [
        send_json(conn, data, tail[s:s + 250], start=head + s)
        for s in range(0, len(tail), 250) if not time.sleep(0.1)], daemon=True)
    try:
        read_topic(conn, predictions_topic(stream), expect=800, settle_s=0, timeout_s=90)
        feeder.start()
        time.sleep(0.5)
        first.kill()  # SIGKILL: no flush, no commit
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    feeder.join(30)
    at_kill = _committed(conn, stream, data)
    before = len(read_topic(conn, predictions_topic(stream), expect=1, settle_s=0.5))
    assert before < n, "the kill came too late to be mid-stream"
    second = _spawn(settings, cli=False, **env)
    try:
        wanted = _input_offsets(conn, data, n)
        assert len(wanted) == n
        eventually(lambda: wanted <= set(_sources(read_topic(
            conn, predictions_topic(stream), expect=n, settle_s=0, timeout_s=5))),
            timeout_s=90, what="every input offset predicted")
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    msgs = read_topic(conn, predictions_topic(stream), expect=n, settle_s=1.0)
    counts = Counter(_sources(msgs))
    assert set(counts) == wanted
    dups = [src for src, c in counts.items() if c > 1]
    for p, o in dups:  # only what was past the last commit when it died
        assert o >= max(at_kill.get(p, 0), 0)
    by_src: dict[tuple[int, int], set[bytes]] = {}
    for m in msgs:
        d = json.loads(m.value())
        by_src.setdefault((d["source_partition"], d["source_offset"]), set()).add(m.value())
    assert all(len(by_src[s]) == 1 for s in dups), "duplicates must be identical"
