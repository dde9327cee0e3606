"""The broker stopped for 10 s and restarted under two scorers in one group: producers and scorers
reconnect by themselves, the group they form again scores every record acknowledged after the
restart, and a control plane through the same restart carries on or says it is unhealthy, then
routes a request made after it (D32).

The test owns its broker (an embedded Tansu on a fixed port), whatever HEADRACE_TEST_BROKER
says (tests/faults/kafka restarts an Apache Kafka node with its data kept). The embedded broker
keeps nothing in memory across a restart, so topics are recreated and the check is on every
record acknowledged after the restart (a real Kafka would also keep the ones before).

The data topic comes back a few seconds after the broker (``TOPIC_GAP_S``): meanwhile the
scorer's consumer gets error events (unknown topic or partition, a partition count that
changed), which killed it with ``SystemError`` before ``client_errors`` classified them.
First, a client that is not Headrace's produces to it, and the broker auto-creates it with its
default partition count (4 on Tansu, the stream had 3): the scorers must read all four (CI once
saw this by chance, D42/D43). Headrace's own clients create nothing: the scorers create their
lost topics again as at start (the compacted ``control.lineage`` with 1 partition, not the
broker's 4).
(tests/faults/kafka/test_cluster_restart.py restarts a whole Apache Kafka cluster likewise.)
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.topics import LINEAGE
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    ControlProcess,
    LoadGenerator,
    ScorerProcess,
    Stream,
    TopicReader,
    check,
    committed,
    ensure_stream_topics,
    figures,
    good_record,
    publish_tiny_model,
    wait_covered,
)
from tests.fixtures import eventually

pytestmark = [
    pytest.mark.slow, needs_scorer,
]
DOWN_S = 10.0
TOPIC_GAP_S = 4.0
STALL_S = 20.0  # the scorers' HEADRACE_SCORER_STALL_S: a group standstill is said this soon


def test_broker_down_10s_then_back_producers_and_scorers_reconnect_and_lose_nothing(
        own_broker: EmbeddedBroker, dfs: Path, tmp_path: Path) -> None:
    conn = KafkaConnection(bootstrap=own_broker.bootstrap, timeout_s=15.0)
    stream = Stream("frestart", 3)
    ensure_stream_topics(conn, stream)
    publish_tiny_model(dfs, "mrestart")
    # A non-idempotent load producer: an idempotent one is fatally fenced by a broker that lost
    # its producer state (UNKNOWN_PRODUCER_ID) -- the scorer's own producer must cope with that.
    load = LoadGenerator(conn, stream, rate=100, total=100_000, idempotent=False).start()
    # Two scorers in one group: both reconnect, and the group they form again scores it all.
    stall = {"HEADRACE_SCORER_STALL_S": str(STALL_S)}
    s = ScorerProcess(stream=stream, model="mrestart", bootstrap=own_broker.bootstrap, dfs=dfs,
                      log_dir=tmp_path, extra_env=stall)
    s2 = ScorerProcess(stream=stream, model="mrestart", bootstrap=own_broker.bootstrap, dfs=dfs,
                       log_dir=tmp_path, extra_env=stall)
    control = ControlProcess(bootstrap=own_broker.bootstrap, dfs=dfs, log_dir=tmp_path,
                             prefix="brk")
    try:
        s.wait_ready(timeout_s=180)  # two TensorFlow starts on 2 shared cores
        s2.wait_ready(timeout_s=180)
        eventually(lambda: (control.probe("/readyz") or (0, {}))[0] == 200, timeout_s=60,
                   what="the control plane ready")
        time.sleep(3.0)
        before = len(load.all_acked())
        own_broker.stop()
        down_at = time.monotonic()
        time.sleep(DOWN_S)
        load.epoch = 1  # records produced from now on belong to the restarted broker
        # A user's producer (auto-creation on, the client's default) meets the broker without
        # the topic before the scorers do (they are paused for it: else they may create it
        # first): Tansu creates it with 4 partitions.
        for each in (s, s2):
            each.signal(signal.SIGSTOP)
        try:
            own_broker.start()
            foreign = Producer({"bootstrap.servers": own_broker.bootstrap})
            foreign.produce(stream.data, good_record(0), b"foreign")
            assert foreign.flush(15) == 0
        finally:
            for each in (s, s2):
                each.signal(signal.SIGCONT)
        assert partition_count(conn, stream.data) == 4, "the broker's default partitions"
        time.sleep(TOPIC_GAP_S)  # the scorer meets a broker without its other topics
        ensure_stream_topics(conn, stream)
        up_at = time.monotonic()
        # Recovery: the first prediction of a record acknowledged by the restarted broker.
        preds = TopicReader(conn, stream.predictions)
        recovered_s = None
        while time.monotonic() - up_at < 30 and s.alive() and s2.alive():
            preds.poll(0.3)
            if preds.records and load.acked[1]:
                recovered_s = time.monotonic() - up_at
                break
        time.sleep(3.0)
        load.stop()
        dlq = TopicReader(conn, stream.dlq)
        wait_covered(preds, lambda: load.acked[1], data_topic=stream.data, timeout_s=60,
                     dlq=dlq, alive=lambda: s.alive() and s2.alive())
        preds.drain(idle_s=1.0)
        # The memory broker reuses offsets after a restart: predictions of records acknowledged
        # before the stop (still in flight in the scorer) are told apart by their key.
        old_keys = {k.decode() for k in load.acked_keys[0]}
        fresh = [r for r in preds.records if json.loads(r.value)["key"] not in old_keys]
        c = check(load.acked[1], fresh, dlq.records, data_topic=stream.data)
        figures("broker_restart", **c.summary(), acked_before_stop=before,
                down_s=round(up_at - down_at, 1),
                recovered_s=None if recovered_s is None else round(recovered_s, 1),
                scorers_alive=[s.alive(), s2.alive()],
                scorer_exits=[s.proc.returncode, s2.proc.returncode],
                load_errors=len(load.failed))
        for each in (s, s2):
            assert each.alive(), (f"a scorer exited {each.proc.returncode} after the broker "
                                  f"restart instead of reconnecting:\n{each.log_tail()}")
        assert load.acked[1], f"the load producer did not reconnect: {load.failed[:3]}"
        assert recovered_s is not None, f"no prediction after the restart:\n{s.log_tail()}"
        # Created again by the scorers as their catalog says, not by a produce.
        assert partition_count(conn, LINEAGE) == 1
        if c.missing:
            seen = group_seen(conn, stream)
            if "a new member was given nothing" in seen:
                # D45 (RELIABILITY.md): the embedded broker's group coordinator is wedged for
                # this group, so no member, old or new, is given a partition. Scorers no longer
                # walk into it (D65: 3 of 12 runs before, none of 24 after); seen again, it came
                # by another path. What a scorer
                # owes then is to say so (D43): both fail their probes, and Kubernetes restarts
                # them. Anything else missing fails below.
                # The probes are asked, as the kubelet would: a scorer says why when asked.
                for each in (s, s2):
                    eventually(lambda e=each: e.probe("/livez") == 503,
                               timeout_s=STALL_S + 40, interval_s=1.0,
                               what=f"{each.log_path.name}'s /livez failing on the standstill")
                    said = each.log_path.read_text(errors="replace")
                    assert "/livez failing: stalled: holding no partition" in said, \
                        each.log_tail()
                pytest.xfail(f"D45 (Tansu's, its known path closed by D65): the embedded "
                             f"broker's group is wedged: {seen}; "
                             f"{len(c.missing)} records unscored: "
                             f"{where_missing(conn, stream, c.missing)}")
        assert not c.missing, (f"{len(c.missing)} acknowledged records unscored: "
                               f"{where_missing(conn, stream, c.missing)}; the scorers hold: "
                               f"{[holding(each) for each in (s, s2)]}; the group as the "
                               f"broker holds it: {group_seen(conn, stream)}; where they are:\n"
                               f"{stacks(s)}\n{stacks(s2)}")
        assert not c.non_identical
        for each in (s, s2):
            rc, _ = each.terminate()
            assert rc == 0, each.log_tail()
        # The control plane carries on (ready), or says it is not (503 with a reason), or
        # exited non-zero to be restarted: never green while it cannot work.
        seen = control.probe("/readyz")
        state = ("exited" if not control.alive() else "silent" if seen is None
                 else "ready" if seen[0] == 200 else "unready")
        figures("broker_restart_control", state=state, exit=control.proc.returncode,
                body=None if seen is None else seen[1])
        if state == "exited":
            assert control.proc.returncode not in (0, None), control.log_tail()
        else:
            assert seen is not None, f"the control plane's probes did not answer:\n" \
                                     f"{control.log_tail()}"
            code, body = seen
            assert code == 200 or (code == 503 and body.get("reason")), body
            live = control.probe("/livez")
            assert live is not None and (live[0] == 200 or live[1].get("problems")), live
        # ... and it routes a request made after the restart (one that exited is restarted
        # first, as Kubernetes would): run, refused by its missing dataset, and said so on
        # events.jobs.
        if state == "exited":
            control.stop()
            control = ControlProcess(bootstrap=own_broker.bootstrap, dfs=dfs, log_dir=tmp_path,
                                     prefix="brk")
        eventually(lambda: (control.probe("/readyz") or (0, {}))[0] == 200, timeout_s=90,
                   what=f"the control plane ready after the restart:\n{control.log_tail()}")
        control.routes_a_request(conn, dfs, "brk", "after-restart")
    finally:
        control.stop()
        load.stop()
        for each in (s, s2):
            if each.alive():
                each.proc.kill()
                each.wait(10)


def where_missing(conn: KafkaConnection, stream: Stream, missing: list[tuple[int, int]]) -> str:
    """Per partition: the unscored offsets' range, the group's committed offset and the log's
    end, as the broker holds them (what a failure needs to be read)."""
    done = committed(conn, stream.group, stream.data)
    c = Consumer({**conn.base(), "group.id": "where-missing"})
    try:
        out = []
        for p in sorted({p for p, _ in missing}):
            offs = [o for q, o in missing if q == p]
            _, high = c.get_watermark_offsets(TopicPartition(stream.data, p), timeout=5)
            out.append(f"p{p}: {len(offs)} in {min(offs)}..{max(offs)}, committed "
                       f"{done.get(p)}, end {high}")
        return "; ".join(out)
    finally:
        c.close()


def group_seen(conn: KafkaConnection, stream: Stream) -> str:
    """The group's state and members as the broker describes them, and whether a new member
    is given partitions within 15 s (if not, the broker's group is wedged, not the scorers)."""
    out = []
    try:
        admin = AdminClient(conn.base())
        d = admin.describe_consumer_groups([stream.group])[stream.group].result(10)
        out.append(f"state {d.state}, members " + ", ".join(
            f"{m.member_id[-6:]}:{sorted(tp.partition for tp in m.assignment.topic_partitions)}"
            for m in d.members))
    except Exception as exc:
        out.append(f"not described ({exc})")
    got: list[int] = []
    c = Consumer(conn.consumer_config(stream.group))  # a scorer's settings: joins as fast
    try:
        c.subscribe([stream.data], on_assign=lambda _c, ps: got.extend(p.partition for p in ps))
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            c.poll(0.2)
        out.append(f"a new member was given {sorted(got)} within 15 s" if got
                   else "a new member was given nothing within 15 s")
    finally:
        c.close()
    return "; ".join(out)


def stacks(scorer: ScorerProcess) -> str:
    """Every thread's stack, which a scorer prints on SIGUSR2, and its probes' bodies."""
    if not scorer.alive():
        return f"(exited {scorer.proc.returncode})"
    before = scorer.log_path.stat().st_size
    scorer.signal(signal.SIGUSR2)
    time.sleep(1.0)
    with scorer.log_path.open("rb") as f:
        f.seek(before)
        dump = f.read().decode(errors="replace")
    probes = [(p, scorer.probe(p)) for p in ("/livez", "/readyz")]
    return f"{scorer.log_path.name} {probes}:\n{dump[-6000:]}"


def holding(scorer: ScorerProcess) -> str:
    """What a scorer last said it holds (its consumer logs each assignment and revocation)."""
    said = [ln for ln in scorer.log_path.read_text(errors="replace").splitlines()
            if "; holding " in ln]
    return said[-1].split("; holding ", 1)[1] if said else "nothing said"
