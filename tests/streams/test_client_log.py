"""librdkafka's log lines through ``ClientLog`` (a clock of the test's): one line per client,
broker and error per 30 s whatever the client's retry rate, the count of those held back, a
summary a minute naming the unreachable brokers, and ``unreachable()`` for the probes."""

from __future__ import annotations

import logging

import pytest

from headrace.scorers.engine.probing import ProbeState
from headrace.streams.client_log import ClientLog

FMT = "%s [%s] %s"
REFUSED = ("[thrd:127.0.0.1:{p}/bootstrap]: 127.0.0.1:{p}/bootstrap: Connect to "
           "ipv4#127.0.0.1:{p} failed: Connection refused (after {ms}ms in state CONNECT)")


def test_a_client_retrying_every_50ms_for_a_minute_logs_a_few_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = ClientLog(logging.getLogger("test.kafka"), clock=lambda: now[0])
    caplog.set_level(logging.INFO, "test.kafka")
    for step in range(1200):  # 60 s at 20 tries a second, two clients, two brokers
        now[0] = step * 0.05
        for client in ("rdkafka#consumer-1", "rdkafka#producer-2"):
            for port in (9092, 9093):
                log.log(logging.ERROR, FMT, "FAIL", client, REFUSED.format(p=port, ms=step % 3))
    lines = [r.getMessage() for r in caplog.records]
    refused = [ln for ln in lines if "Connection refused (after" in ln]
    summaries = [ln for ln in lines if ln.startswith("Kafka broker(s) unreachable")]
    # 2 clients x 2 brokers x (t=0, 30): 8 lines instead of 4,800, and one summary a minute.
    assert len(refused) == 8 and len(summaries) == 1, lines
    assert sum("599 more like it" in ln for ln in refused) == 4  # what was held back, said
    assert "127.0.0.1:9092 (Connection refused, for 0s)" in summaries[0]
    assert "127.0.0.1:9093" in (log.unreachable() or "")
    now[0] = 60.0 + 26.0  # no failure for longer than the longest reconnect back-off
    assert log.unreachable() is None


def test_the_probes_say_which_broker_is_unreachable() -> None:
    state = ProbeState(liveness_s=30)
    state.model_ready = lambda: True
    state.start()
    state.kafka_unreachable = lambda: "broker(s) unreachable: 127.0.0.1:9092 (Connection refused)"
    ok, info = state.ready()
    assert not ok and info["reason"] == ("no partitions assigned: broker(s) unreachable: "
                                         "127.0.0.1:9092 (Connection refused)")
    assert "127.0.0.1:9092" in str(state.live()[1]["kafka"])
