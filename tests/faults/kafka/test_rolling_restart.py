"""A rolling restart of all three brokers (as an upgrade does it: one at a time, a controlled
shutdown, the next only once every replica is back in sync) under a running scorer and load:
every acknowledged record has its prediction, duplicates agree, the scorer never restarts."""

from __future__ import annotations

import time

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


def out_of_sync(cluster: KafkaCluster) -> list[str]:
    """Every partition of the cluster (internal topics included) whose ISR lacks a replica."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    return [f"{t}[{p}]" for t, tm in md.topics.items() for p, pm in tm.partitions.items()
            if set(pm.isrs) != set(pm.replicas)]


def test_a_rolling_restart_of_every_broker_under_load_loses_no_acknowledged_record(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream,
        scorers: Scorers) -> None:
    t0 = time.monotonic()
    load = LoadGenerator(conn, stream, rate=150, total=1_000_000).start()
    s = scorers.start()
    preds = TopicReader(conn, stream.predictions)
    rolls: list[tuple[int, float, float]] = []  # node, down s, back in every ISR s
    try:
        s.wait_ready(timeout_s=90)
        eventually(lambda: preds.poll(0.2) >= 0 and len(preds.records) >= 100, timeout_s=60,
                   what="predictions before the first restart")
        eventually(lambda: not out_of_sync(kafka_cluster), timeout_s=60,
                   what="every replica in sync before the roll")
        for node in kafka_cluster.nodes:
            before = len(load.all_acked())
            t_stop = time.monotonic()
            node.stop()  # SIGTERM: a controlled shutdown moves its leaderships first
            assert not node.alive()
            # Two brokers acknowledge while it is down (acks=all, min.insync.replicas 2).
            eventually(lambda: len(load.all_acked()) >= before + 300,  # noqa: B023 - called here
                       timeout_s=60, what=f"records acknowledged with node {node.node_id} down")
            node.start()
            kafka_cluster.wait_ready(nodes=[node.node_id], timeout_s=150)
            down_s = time.monotonic() - t_stop
            # The next node goes only when this one is back in every ISR (internal topics
            # too): else stopping it would leave a partition under min.insync.replicas.
            eventually(lambda: not out_of_sync(kafka_cluster), timeout_s=120, interval_s=0.5,
                       what=f"node {node.node_id} back in every ISR")
            rolls.append((node.node_id, round(down_s, 1),
                          round(time.monotonic() - t_stop - down_s, 1)))
            assert s.alive(), s.log_tail()
        during = len(load.all_acked())
        eventually(lambda: len(load.all_acked()) >= during + 300, timeout_s=60,
                   what="records acknowledged after the roll")
        load.stop()
        dlq = TopicReader(conn, stream.dlq)
        acked = load.all_acked()
        c = settle(preds, dlq, acked, data_topic=stream.data, alive=s.alive)
        alive = s.alive()
        rc, _ = s.terminate()
        ends = commit_ends(acked)
        commits = committed(conn, stream.group, stream.data)
        figures("kafka_rolling_restart", **c.summary(),
                rolls=";".join(f"node{n}:down={d}s,isr={i}s" for n, d, i in rolls),
                load_errors=len(load.failed), test_s=round(time.monotonic() - t0, 1))
        assert not load.failed, load.failed[:3]
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        # At-least-once: a redelivered record may be scored twice; the copies must agree.
        assert not c.non_identical, c.non_identical[:10]
        assert not c.dead_letters and not c.both, dlq.records[:3]
        assert alive and rc == 0, s.log_tail()
        assert all(commits.get(p, -1) >= end for p, end in ends.items()), (commits, ends)
    finally:
        load.stop()
        preds.close()
