"""The scorer's transactional mode end to end on Apache Kafka (Tansu's read_committed returns
aborted records, so it was never proven): transactional scorers SIGKILLed mid-stream and
restarted under their transactional.id leave exactly one prediction of every acknowledged
record visible to a fresh read_committed reader, and the group's offsets cover them all."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

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
KILLS = 2


def count_uncommitted(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_uncommitted reader sees (aborted transactions' included)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_uncommitted", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    n, eof = 0, set()
    deadline = time.monotonic() + 30
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    n += 1
                elif m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
        return n
    finally:
        c.close()


def test_transactional_scorers_killed_leave_exactly_one_committed_prediction_per_record(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream, scorers: Scorers,
        tmp_path: Path) -> None:
    t0 = time.monotonic()
    txn = {"HEADRACE_SCORER_TRANSACTIONAL": "true",
           # A restarted container keeps its transactional.id: its init fences the killed one
           # and aborts its open transaction at once.
           "HEADRACE_SCORER_TRANSACTIONAL_ID": f"{stream.group}.t0"}
    load = LoadGenerator(conn, stream, rate=250, total=6000).start()
    preds = TopicReader(conn, stream.predictions)  # read_committed, like every Headrace reader
    s = scorers.start(extra_env=txn)
    try:
        for k in range(KILLS):
            s.wait_ready(timeout_s=90)
            seen = len(preds.records)
            eventually(lambda seen=seen: preds.poll(0.2) >= 0
                       and len(preds.records) >= seen + 400,
                       timeout_s=60, what=f"committed predictions before kill {k + 1}")
            s.kill9()
            s = scorers.start(extra_env=txn)
        s.wait_ready(timeout_s=90)
        load.join(120)
        acked = load.all_acked()
        dlq = TopicReader(conn, stream.dlq)
        c = settle(preds, dlq, acked, data_topic=stream.data, alive=s.alive, idle_s=1.5)
        rc, _ = s.terminate()
        raw = count_uncommitted(kafka_cluster.bootstrap, stream.predictions, stream.partitions)
        ends = commit_ends(acked)
        commits = committed(conn, stream.group, stream.data)
        figures("kafka_transactional_kill9", **c.summary(), kills=KILLS,
                aborted_hidden=raw - len(preds.records),
                load_errors=len(load.failed), test_s=round(time.monotonic() - t0, 1))
        assert len(acked) == 6000 and not load.failed, load.failed[:3]
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        assert c.duplicates == 0, (f"{c.duplicates} duplicate predictions visible to "
                                   f"read_committed: {c.duplicated_offsets[:10]}")
        assert not c.dead_letters
        assert rc == 0, s.log_tail()
        assert commits == ends, (commits, ends)
    finally:
        load.stop()
        preds.close()
