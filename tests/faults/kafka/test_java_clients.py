"""Clients nobody here wrote: Apache Kafka's own Java console producer (from the cluster's jars)
sends keyed JSON records with headers, good and malformed; a scorer scores the good ones and
dead-letters the others; the Java console consumer reads the predictions and the dead letters
back, keys, headers and values intact. kafka-python sends records too (scored) and reads
the data topic back."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.dlq import DLQ_STAGE
from headrace.streams.reading import iter_records
from headrace.streams.topics import TopicSpec
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    Scorers,
    Stream,
    TopicReader,
    check,
    figures,
    good_record,
    wait_covered,
)
from tests.fixtures import eventually
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, needs_scorer]
GOOD, BAD, PY = 300, 5, 50
# Kafka's tools log to stdout by default: to stderr here, so stdout holds only records.
LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""


def java_tool(cluster: KafkaCluster, tmp: Path, main: str, *args: str) -> list[str]:
    (tmp / "tools-log4j2.properties").write_text(LOG4J2)
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={tmp / 'tools-log4j2.properties'}",
            "-cp", f"{cluster.nodes[0].lib}/*", main, "--bootstrap-server", cluster.bootstrap,
            *args]


def java_consume(cluster: KafkaCluster, tmp: Path, topic: str,
                 n: int) -> list[tuple[dict[str, str], str, str]]:
    """(headers, key, value) of the first ``n`` records, as Kafka's console consumer prints
    them (headers, key and value separated by tabs; values here hold no tab)."""
    out = subprocess.run(java_tool(
        cluster, tmp, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--topic", topic,
        "--from-beginning", "--max-messages", str(n), "--timeout-ms", "60000",
        "--isolation-level", "read_committed",
        "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
        "--formatter-property", "key.separator=\t",
        "--formatter-property", "headers.separator=,",
        "--formatter-property", "headers.key.separator=:"),
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = []
    for line in out.stdout.splitlines():
        headers, key, value = line.split("\t", 2)
        hs = dict(h.split(":", 1) for h in headers.split(",")) if headers != "NO_HEADERS" else {}
        rows.append((hs, key, value))
    return rows


def test_java_console_clients_send_records_headrace_scores_and_read_its_outputs(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream, scorers: Scorers,
        tmp_path: Path) -> None:
    t0 = time.monotonic()
    s = scorers.start()
    s.wait_ready(timeout_s=90)
    lines = [f"content-type:application/json,trace:t{i}\tj{i}\t{good_record(i).decode()}"
             for i in range(GOOD)]
    lines += [f"content-type:application/json,trace:b{i}\tbad{i}\tnot json {i}"
              for i in range(BAD)]
    t_send = time.monotonic()
    sent = subprocess.run(java_tool(
        kafka_cluster, tmp_path, "org.apache.kafka.tools.ConsoleProducer",
        "--topic", stream.data, "--reader-property", "parse.key=true",
        "--reader-property", "parse.headers=true", "--reader-property", "key.separator=\t",
        "--reader-property", "headers.delimiter=\t", "--reader-property", "headers.separator=,",
        "--reader-property", "headers.key.separator=:"),
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    java_produce_s = time.monotonic() - t_send
    assert sent.returncode == 0, sent.stderr[-3000:]
    # What the Java producer wrote, as the broker holds it (its own murmur2 partitioning).
    data = TopicReader(conn, stream.data)
    eventually(lambda: data.poll(0.3) >= 0 and len(data.records) >= GOOD + BAD, timeout_s=60,
               what=f"the Java producer's records ({sent.stderr[-2000:]})")
    data.drain(idle_s=1.0)
    assert len(data.records) == GOOD + BAD
    inputs = {(r.partition, r.offset) for r in data.records}
    assert all(r.headers.get("trace") for r in data.records)
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    try:
        wait_covered(preds, lambda: inputs, data_topic=stream.data, timeout_s=90, dlq=dlq,
                     alive=s.alive)
        c = check(inputs, preds.records, dlq.records, data_topic=stream.data)
        assert not c.missing and not c.duplicates and not c.both, c.summary()
        assert (c.predictions, c.dead_letters) == (GOOD, BAD), c.summary()
    finally:
        preds.close()
        dlq.close()
    # Kafka's console consumer reads both back.
    t_read = time.monotonic()
    jp = java_consume(kafka_cluster, tmp_path, stream.predictions, GOOD)
    jd = java_consume(kafka_cluster, tmp_path, stream.dlq, BAD)
    java_consume_s = time.monotonic() - t_read
    by_key = {key: (hs, json.loads(v)) for hs, key, v in jp}
    assert sorted(by_key) == sorted(f"j{i}" for i in range(GOOD))
    where = {(r.partition, r.offset): r.value for r in data.records}
    for key, (hs, p) in by_key.items():
        assert hs.get("content-type") == "application/json", hs
        assert p["key"] == key and p["source_topic"] == stream.data, p
        assert where[(p["source_partition"], p["source_offset"])] == good_record(
            int(key[1:])), p
    assert sorted(k for _, k, _ in jd) == sorted(f"bad{i}" for i in range(BAD))
    for hs, key, v in jd:
        assert hs.get(DLQ_STAGE) == "decode" and v == f"not json {key[3:]}", (hs, v)
    # kafka-python (murmur2 partitioning, its own wire code) sends records too: scored.
    from kafka import KafkaConsumer, KafkaProducer

    t_py = time.monotonic()
    kp = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, acks="all")
    for i in range(GOOD, GOOD + PY):
        kp.send(stream.data, value=good_record(i), key=f"p{i}".encode(),
                headers=[("content-type", b"application/json"), ("trace", f"p{i}".encode())])
    kp.flush(60)
    kp.close()
    data.drain(idle_s=1.0)
    inputs = {(r.partition, r.offset) for r in data.records}
    assert len(inputs) == GOOD + BAD + PY
    where_all = {(r.partition, r.offset): r for r in data.records}
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    try:
        wait_covered(preds, lambda: inputs, data_topic=stream.data, timeout_s=90, dlq=dlq,
                     alive=s.alive)
        c = check(inputs, preds.records, dlq.records, data_topic=stream.data)
        assert not c.missing and not c.duplicates and not c.both, c.summary()
        assert (c.predictions, c.dead_letters) == (GOOD + PY, BAD), c.summary()
    finally:
        preds.close()
        dlq.close()
    # It reads back what both producers wrote, headers included. (The predictions are lz4
    # batches, which kafka-python reads only with the lz4 package; joblib would then load that
    # into every scorer beside librdkafka's own lz4, so it is not installed.)
    kc = KafkaConsumer(stream.data, bootstrap_servers=kafka_cluster.bootstrap,
                       auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    python_read = {(m.partition, m.offset): (m.key, dict(m.headers), m.value) for m in kc}
    kc.close()
    python_s = time.monotonic() - t_py
    assert {p: r.value for p, r in where_all.items()} == {
        p: v for p, (_, _, v) in python_read.items()}
    for i in range(GOOD, GOOD + PY):
        [(hs, v)] = [(hs, v) for k, hs, v in python_read.values() if k == f"p{i}".encode()]
        assert hs == {"content-type": b"application/json", "trace": f"p{i}".encode()}, hs
        assert v == good_record(i)
    rc, _ = s.terminate()
    figures("kafka_java_clients", **c.summary(), java_produce_s=round(java_produce_s, 1),
            java_consume_s=round(java_consume_s, 1),
            kafka_python_read=len(python_read), kafka_python_s=round(python_s, 1),
            test_s=round(time.monotonic() - t0, 1))
    assert rc == 0, s.log_tail()


def test_a_java_producer_and_headrace_with_murmur2_random_put_each_key_on_one_partition(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, tmp_path: Path) -> None:
    """docs/rollout.md: Java clients hash keys with murmur2, librdkafka with CRC32; with
    ``partitioner=murmur2_random`` set on Headrace's side (an operator's client setting), a key
    lands on the same partition whichever wrote it, and without it, on another for most keys."""
    keys = [f"order-{i}" for i in range(200)]
    topics = {w: f"{w}-{uuid.uuid4().hex[:8]}" for w in ("java", "murmur2", "default")}
    ensure_topics(conn, [TopicSpec(t, 6, "partitioner check") for t in topics.values()])
    sent = subprocess.run(java_tool(
        kafka_cluster, tmp_path, "org.apache.kafka.tools.ConsoleProducer",
        "--topic", topics["java"], "--reader-property", "parse.key=true",
        "--reader-property", "key.separator=\t"),
        input="".join(f"{k}\t{{\"label\": 1}}\n" for k in keys), capture_output=True, text=True,
        timeout=120)
    assert sent.returncode == 0, sent.stderr[-3000:]
    for writer, extra in (("murmur2", {"partitioner": "murmur2_random"}), ("default", {})):
        p = make_producer(KafkaConnection(bootstrap=conn.bootstrap, extra=extra))
        for k in keys:
            p.produce(topics[writer], b'{"label": 1}', k.encode())
        assert p.flush(30) == 0

    def placed(topic: str) -> dict[str, int]:
        return {bytes(r.key).decode(): r.partition
                for r in iter_records(conn, topic, idle_s=1.0) if r.key}

    java, murmur2, default = (placed(topics[w]) for w in ("java", "murmur2", "default"))
    assert sorted(java) == sorted(keys) == sorted(murmur2) == sorted(default)
    assert murmur2 == java
    same = sum(default[k] == java[k] for k in keys)
    assert same < len(keys) / 2, same  # CRC32 agrees with murmur2 only by chance (~1 in 6)
    figures("kafka_murmur2_partitioner", keys=len(keys), java_equal_murmur2_random=len(keys),
            java_equal_default=same)
