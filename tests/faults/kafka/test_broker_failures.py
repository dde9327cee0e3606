"""One broker of three -- the leader of a data partition -- stopped (SIGTERM) or SIGKILLed under a
running scorer and load, then restarted with its data kept: every record acknowledged before,
during and after has its prediction, duplicates agree, and the scorer goes on without a restart
(Tansu forgets everything on a restart, so there only records sent after it could be checked)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    LoadGenerator,
    Scorers,
    Stream,
    TopicReader,
    commit_ends,
    committed,
    figures,
    settle,
)
from tests.fixtures import eventually
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, needs_scorer]


def isr(cluster: KafkaCluster, topic: str) -> dict[int, list[int]]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    return {p: list(m.isrs) for p, m in md.topics[topic].partitions.items()}


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_a_leader_stopped_or_killed_and_restarted_with_its_data_loses_no_acknowledged_record(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream, scorers: Scorers,
        tmp_path: Path, how: str) -> None:
    t0 = time.monotonic()
    assert all(len(r) == 3 for r in isr(kafka_cluster, stream.data).values())
    load = LoadGenerator(conn, stream, rate=150, total=1_000_000).start()
    s = scorers.start()
    preds = TopicReader(conn, stream.predictions)
    try:
        s.wait_ready(timeout_s=90)
        eventually(lambda: preds.poll(0.2) >= 0 and len(preds.records) >= 100, timeout_s=60,
                   what="predictions before the stop")
        victim = kafka_cluster.node(kafka_cluster.leader(stream.data, 0))
        before = len(load.all_acked())
        if how == "stop":
            victim.stop()  # SIGTERM: a controlled shutdown; its log stays on disk
        else:
            victim.kill()  # SIGKILL: leaderships move only when its session expires
        stopped_at = time.monotonic()
        # While it is down, the two others acknowledge (acks=all, min.insync.replicas 2).
        eventually(lambda: len(load.all_acked()) >= before + 600, timeout_s=60,
                   what="records acknowledged by two brokers")
        during = len(load.all_acked())
        victim.start()
        kafka_cluster.wait_ready(nodes=[victim.node_id], timeout_s=60)
        down_s = time.monotonic() - stopped_at
        # Back in sync from the data it kept: every replica set whole again.
        eventually(lambda: all(victim.node_id in r for r in isr(kafka_cluster,
                                                                 stream.data).values()),
                   timeout_s=60, what="the restarted broker back in every ISR")
        eventually(lambda: len(load.all_acked()) >= during + 600, timeout_s=60,
                   what="records acknowledged after the restart")
        load.stop()
        # The scorer lives through it: librdkafka's abort here (D34) came from reading the
        # group's offsets through its admin API, which the scorer no longer does.
        assert s.alive(), s.log_tail(50_000)
        dlq = TopicReader(conn, stream.dlq)
        acked = load.all_acked()
        c = settle(preds, dlq, acked, data_topic=stream.data, alive=s.alive)
        alive = s.alive()
        rc, _ = s.terminate()
        ends = commit_ends(acked)
        commits = committed(conn, stream.group, stream.data)
        figures(f"kafka_leader_{how}_restart", **c.summary(), scorer_alive=alive,
                acked_before=before,
                acked_during=during - before, acked_after=len(acked) - during,
                down_s=round(down_s, 1), load_errors=len(load.failed),
                test_s=round(time.monotonic() - t0, 1))
        assert not load.failed, load.failed[:3]
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        assert not c.non_identical and not c.dead_letters
        assert alive and rc == 0, s.log_tail()
        assert all(commits.get(p, -1) >= end for p, end in ends.items()), (commits, ends)
    finally:
        load.stop()
        preds.close()
