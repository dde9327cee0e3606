"""In-sync replicas below ``min.insync.replicas`` under a running scorer and load: producing is
refused retriably (``NOT_ENOUGH_REPLICAS``), nothing acknowledged is lost, the scorer waits
(its probes say it is stalled, and why) rather than dead-lettering, and it resumes by itself once
the replica is back.

One node of three is stopped and the topics' ``min.insync.replicas`` raised to 3: stopping two
of the three combined broker+controller nodes would lose the KRaft quorum, a different fault
(no leader could be elected, no ISR shrunk: produce requests time out instead)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from headrace.streams.client_errors import Kind, kind_of
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
    good_record,
    settle,
)
from tests.fixtures import eventually
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.slow, pytest.mark.kafka, needs_scorer]
# D41: in two CI runs the scorer died during the fault (once with nothing in its log, once by
# SIGSEGV): D34's admin-API read of the group's offsets, every second here (lag check 1 s).
STALL_S = 4.0


def set_min_insync(bootstrap: str, topic: str, n: int) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", str(n), incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def isr_sizes(bootstrap: str, topic: str) -> set[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {len(p.isrs) for p in md.topics[topic].partitions.values()}


def one_try(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    """Produce one record with no client retry: the broker's own answer."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                  "enable.idempotence": False, "message.timeout.ms": 15_000})
    got: list[KafkaError | None] = []
    p.produce(topic, value, b"isr-probe", partition=0,
              on_delivery=lambda err, _m: got.append(err))
    p.flush(20)
    assert got, "no delivery report"
    return got[0]


def refused_once_applied(bootstrap: str, topic: str, value: bytes) -> KafkaError:
    """The broker's refusal, once the leader applies the new ``min.insync.replicas``: the
    change is acknowledged by the controller before every broker has it, and a record taken
    meanwhile (seen once) is why ``value`` must be harmless where it lands."""
    got: list[KafkaError] = []

    def refused() -> bool:
        err = one_try(bootstrap, topic, value)
        if err is not None:
            got.append(err)
        return err is not None

    eventually(refused, timeout_s=30, interval_s=0.5, what=f"{topic} refusing writes")
    return got[-1]


def probe(port: int, path: str) -> tuple[int | None, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return int(r.status), json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return None, {}


def test_isr_below_min_insync_refuses_retriably_the_scorer_waits_and_resumes(
        kafka_cluster: KafkaCluster, conn: KafkaConnection, stream: Stream,
        scorers: Scorers) -> None:
    t0 = time.monotonic()
    boot = kafka_cluster.bootstrap
    load = LoadGenerator(conn, stream, rate=100, total=1_000_000).start()
    s = scorers.start(extra_env={"HEADRACE_SCORER_STALL_S": str(STALL_S),
                                 "HEADRACE_SCORER_LAG_CHECK_S": "1"})
    preds = TopicReader(conn, stream.predictions)
    dlq = TopicReader(conn, stream.dlq)
    try:
        s.wait_ready(timeout_s=90)
        eventually(lambda: preds.poll(0.2) >= 0 and len(preds.records) >= 100, timeout_s=60,
                   what="predictions before the fault")
        victim = kafka_cluster.nodes[-1]
        victim.stop()
        eventually(lambda: all(isr_sizes(boot, t) == {2} for t in (stream.data,
                                                                      stream.predictions)),
                   timeout_s=60, interval_s=0.5, what="the ISRs shrunk to two")
        # The predictions topic first: the scorer's output is refused while its input flows.
        set_min_insync(boot, stream.predictions, 3)
        # Shaped as a prediction of no input, in case it is taken (the check reads them all).
        stray = json.dumps({"source_topic": stream.data, "source_partition": -1,
                            "source_offset": -1}).encode()
        refused = refused_once_applied(boot, stream.predictions, stray)
        assert refused.code() in (
            KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND), refused
        # librdkafka flags no delivery error retriable; Headrace's one classification does.
        assert kind_of(refused, producing=True) is Kind.RETRIABLE, refused
        t_fault = time.monotonic()
        acked_at_fault = len(load.all_acked())

        def stalled() -> dict[str, Any]:
            assert s.alive(), s.log_tail()
            code, body = probe(s.port, "/readyz")
            return body if code == 503 and body.get("reason_code") == "stalled" else {}

        why = eventually(stalled, timeout_s=60, interval_s=0.3, what="/readyz saying stalled")
        stall_seen_s = time.monotonic() - t_fault

        def says_why() -> dict[str, Any]:
            body = stalled()
            return body if "the loop is retrying" in str(body.get("reason")) else {}

        # Once its flush has timed out (10 s), the reason names the cause (D40).
        why = eventually(says_why, timeout_s=60, interval_s=0.3, what="the stall's cause")
        live_code, live = probe(s.port, "/livez")
        # Then the input too: the load producer is refused, retries, and loses nothing.
        set_min_insync(boot, stream.data, 3)
        # A valid record, in case it is taken: scored once the replica is back.
        refused_in = refused_once_applied(boot, stream.data, good_record(0))
        assert refused_in.code() == refused.code(), refused_in
        dlq.poll(0.5)
        assert not dlq.records, "a refused output was dead-lettered instead of waited for"
        victim.start()
        kafka_cluster.wait_ready(nodes=[victim.node_id], timeout_s=90)
        t_back = time.monotonic()
        eventually(lambda: probe(s.port, "/readyz")[0] == 200, timeout_s=90, interval_s=0.3,
                   what="/readyz ready again")
        resumed_s = time.monotonic() - t_back
        after = len(load.all_acked())
        eventually(lambda: len(load.all_acked()) >= after + 200, timeout_s=60,
                   what="records acknowledged after the replica came back")
        load.stop()
        acked = load.all_acked()
        c = settle(preds, dlq, acked, data_topic=stream.data, alive=s.alive)
        alive = s.alive()
        rc, _ = s.terminate()
        ends = commit_ends(acked)
        commits = committed(conn, stream.group, stream.data)
        figures("kafka_isr_below_min", **c.summary(), refused=refused.name(),
                stall_seen_s=round(stall_seen_s, 1), resumed_s=round(resumed_s, 1),
                acked_at_fault=acked_at_fault, load_errors=len(load.failed),
                reason=why.get("reason"), test_s=round(time.monotonic() - t0, 1))
        assert "flush failed" in str(why.get("reason")), why
        assert live_code == 503 and live.get("reason_code") == "stalled", live
        assert not load.failed, load.failed[:3]
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        assert not c.non_identical, c.non_identical[:10]
        assert not c.dead_letters, dlq.records[:3]
        assert alive and rc == 0, s.log_tail()
        assert all(commits.get(p, -1) >= end for p, end in ends.items()), (commits, ends)
    finally:
        load.stop()
        preds.close()
        dlq.close()
