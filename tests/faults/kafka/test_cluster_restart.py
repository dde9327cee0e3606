"""Every Apache Kafka broker stopped and started again with its data under two scorers in one
group and a control plane (issue 34): the scorers reconnect without dying, every record
acknowledged before the stop and after the restart is scored (Kafka keeps its log, unlike the
embedded broker of ``tests/faults/test_broker_restart.py``), and the control plane routes a
request made after the restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    ControlProcess,
    LoadGenerator,
    Scorers,
    Stream,
    TopicReader,
    check,
    figures,
    wait_covered,
)
from tests.fixtures import eventually
from tests.real_kafka import stop_every_node
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, needs_scorer]


def _control_ready(control: ControlProcess) -> bool:
    assert control.alive(), f"the control plane exited {control.proc.returncode}:\n" \
                            f"{control.log_tail()}"
    return (control.probe("/readyz") or (0, {}))[0] == 200


def test_the_whole_cluster_restarted_with_its_data_under_two_scorers_and_a_control_plane(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream, scorers: Scorers,
        dfs: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    prefix = f"kr{stream.name[1:7]}"
    load = LoadGenerator(conn, stream, rate=100, total=1_000_000).start()
    pair = [scorers.start(), scorers.start()]
    control = ControlProcess(bootstrap=kafka_cluster.bootstrap, dfs=dfs, log_dir=tmp_path,
                             prefix=prefix)
    preds = TopicReader(conn, stream.predictions)
    try:
        for s in pair:
            s.wait_ready(timeout_s=90)
        eventually(lambda: _control_ready(control), timeout_s=90, what="the control plane ready")
        eventually(lambda: preds.poll(0.2) >= 0 and len(preds.records) >= 100, timeout_s=60,
                   what="predictions before the stop")
        before = len(load.all_acked())
        stopped_at = time.monotonic()
        stop_every_node(kafka_cluster)
        for node in kafka_cluster.nodes:  # from this thread: a node dies with its starter's
            node.start()
        kafka_cluster.wait_ready(timeout_s=90)
        down_s = time.monotonic() - stopped_at
        after = len(load.all_acked())
        eventually(lambda: len(load.all_acked()) >= after + 300, timeout_s=90,
                   what="records acknowledged after the restart")
        load.stop()
        # Both scorers live through it (librdkafka's abort, D34, came from the admin API's
        # group offsets read, which the scorers no longer make).
        for s in pair:
            assert s.alive(), s.log_tail(50_000)
        dlq = TopicReader(conn, stream.dlq)
        # A batch the producer sent again across the restart may be acknowledged as a duplicate
        # of one the cluster had kept, without its offset: all_acked locates those by key.
        acked = load.all_acked()
        no_offset = len(load.no_offset[0])
        covered_s = wait_covered(preds, lambda: acked, data_topic=stream.data, timeout_s=90,
                                 dlq=dlq, alive=lambda: all(s.alive() for s in pair))
        preds.drain(idle_s=1.0)
        c = check(acked, preds.records, dlq.records, data_topic=stream.data)
        unscored_keys = {k.decode() for k in load.acked_keys[0] if k is not None} - {
            json.loads(r.value)["key"] for r in preds.records}
        alive = [s.alive() for s in pair]
        exits = [s.terminate()[0] for s in pair]
        figures("kafka_cluster_restart", **c.summary(), acked_before=before,
                acked_after=len(acked) - after, down_s=round(down_s, 1),
                covered_s=round(covered_s, 1), scorers_alive=alive, scorer_exits=exits,
                acked_without_offset=no_offset, load_errors=len(load.failed))
        assert not unscored_keys, f"{len(unscored_keys)} acknowledged keys unscored"
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        assert not c.non_identical and not c.dead_letters
        assert all(alive) and exits == [0, 0], [s.log_tail() for s in pair]

        # The control plane routes a request made after the restart (restarted first if it
        # exited, as Kubernetes would): run, refused by its missing dataset, said on events.jobs.
        if not control.alive():
            assert control.proc.returncode != 0, control.log_tail()
            control.stop()
            control = ControlProcess(bootstrap=kafka_cluster.bootstrap, dfs=dfs,
                                     log_dir=tmp_path, prefix=prefix)
        eventually(lambda: _control_ready(control), timeout_s=90,
                   what=f"the control plane ready after the restart:\n{control.log_tail()}")
        control.routes_a_request(conn, dfs, prefix, f"after-restart-{prefix}")
        figures("kafka_cluster_restart_test", test_s=round(time.monotonic() - t0, 1))
    finally:
        control.stop()
        load.stop()
        preds.close()

