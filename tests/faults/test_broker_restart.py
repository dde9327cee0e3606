"""The broker stopped for 10 s and restarted: producers and scorers reconnect by themselves,
and a control plane through the same restart carries on or says it is unhealthy.

The test owns its broker (an embedded Tansu on a fixed port), whatever HEADRACE_TEST_BROKER
says (tests/faults/kafka restarts an Apache Kafka node with its data kept). The embedded broker
keeps nothing in memory across a restart, so topics are recreated and the check is on every
record acknowledged after the restart (a real Kafka would also keep the ones before).

The data topic comes back a few seconds after the broker (``TOPIC_GAP_S``): meanwhile the
scorer's consumer gets error events (unknown topic or partition, a partition count that
changed), which killed it with ``SystemError`` before ``client_errors`` classified them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    ControlProcess,
    LoadGenerator,
    ScorerProcess,
    Stream,
    TopicReader,
    check,
    ensure_stream_topics,
    figures,
    publish_tiny_model,
    wait_covered,
)
from tests.fixtures import eventually

pytestmark = [
    pytest.mark.slow, needs_scorer,
]
DOWN_S = 10.0
TOPIC_GAP_S = 4.0


def test_broker_down_10s_then_back_producers_and_scorers_reconnect_and_lose_nothing(
        own_broker: EmbeddedBroker, dfs: Path, tmp_path: Path) -> None:
    conn = KafkaConnection(bootstrap=own_broker.bootstrap, timeout_s=15.0)
    stream = Stream("frestart", 3)
    ensure_stream_topics(conn, stream)
    publish_tiny_model(dfs, "mrestart")
    # A non-idempotent load producer: an idempotent one is fatally fenced by a broker that lost
    # its producer state (UNKNOWN_PRODUCER_ID) -- the scorer's own producer must cope with that.
    load = LoadGenerator(conn, stream, rate=100, total=100_000, idempotent=False).start()
    s = ScorerProcess(stream=stream, model="mrestart", bootstrap=own_broker.bootstrap, dfs=dfs,
                      log_dir=tmp_path)
    control = ControlProcess(bootstrap=own_broker.bootstrap, dfs=dfs, log_dir=tmp_path,
                             prefix="brk")
    try:
        s.wait_ready()
        eventually(lambda: (control.probe("/readyz") or (0, {}))[0] == 200, timeout_s=60,
                   what="the control plane ready")
        time.sleep(3.0)
        before = len(load.all_acked())
        own_broker.stop()
        down_at = time.monotonic()
        time.sleep(DOWN_S)
        load.epoch = 1  # records produced from now on belong to the restarted broker
        own_broker.start()
        time.sleep(TOPIC_GAP_S)  # the scorer meets a broker without its topic
        ensure_stream_topics(conn, stream)
        up_at = time.monotonic()
        # Recovery: the first prediction of a record acknowledged by the restarted broker.
        preds = TopicReader(conn, stream.predictions)
        recovered_s = None
        while time.monotonic() - up_at < 30 and s.alive():
            preds.poll(0.3)
            if preds.records and load.acked[1]:
                recovered_s = time.monotonic() - up_at
                break
        time.sleep(3.0)
        load.stop()
        dlq = TopicReader(conn, stream.dlq)
        wait_covered(preds, lambda: load.acked[1], data_topic=stream.data, timeout_s=60,
                     dlq=dlq, alive=s.alive)
        preds.drain(idle_s=1.0)
        # The memory broker reuses offsets after a restart: predictions of records acknowledged
        # before the stop (still in flight in the scorer) are told apart by their key.
        old_keys = {k.decode() for k in load.acked_keys[0]}
        fresh = [r for r in preds.records if json.loads(r.value)["key"] not in old_keys]
        c = check(load.acked[1], fresh, dlq.records, data_topic=stream.data)
        figures("broker_restart", **c.summary(), acked_before_stop=before,
                down_s=round(up_at - down_at, 1),
                recovered_s=None if recovered_s is None else round(recovered_s, 1),
                scorer_alive=s.alive(), scorer_exit=s.proc.returncode,
                load_errors=len(load.failed))
        assert s.alive(), (f"the scorer exited {s.proc.returncode} after the broker restart "
                           f"instead of reconnecting:\n{s.log_tail()}")
        assert load.acked[1], f"the load producer did not reconnect: {load.failed[:3]}"
        assert recovered_s is not None, f"no prediction after the restart:\n{s.log_tail()}"
        assert not c.missing, f"{len(c.missing)} acknowledged records unscored: {c.missing[:10]}"
        assert not c.non_identical
        rc, _ = s.terminate()
        assert rc == 0, s.log_tail()
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
    finally:
        control.stop()
        load.stop()
        if s.alive():
            s.proc.kill()
            s.wait(10)
