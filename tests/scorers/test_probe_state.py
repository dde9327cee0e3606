"""The scorer's probes mean it: ``ProbeState`` with an injected clock and a fake lag source.

The defect: every loop turn counted as progress, so a scorer whose polls returned nothing (a
hung group coordinator) stayed live and ready for minutes while its lag grew to 59,170.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.probing import ProbeState
from headrace.scorers.engine.stall import GroupStandstill, Lag, LagWatch
from headrace.scorers.engine.stream_io import StreamIO
from headrace.streams.clients import KafkaConnection
from headrace.streams.consuming import BatchConsumer
from headrace.streams.group_lag import GroupLag
from tests.faults.harness import produce_all


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def running(clock: Clock, lag: Lag | None, *, stall_s: float = 60.0,
            metrics: ScorerMetrics | None = None) -> tuple[ProbeState, dict[str, float | None]]:
    state = ProbeState(liveness_s=30.0, stall_s=stall_s, clock=clock, metrics=metrics)
    worker: dict[str, float | None] = {"loop": clock.t, "consumed": None}
    state.model_ready = lambda: True
    state.model_ref = lambda: "m:1"
    state.assigned = lambda: 3
    state.last_progress = lambda: worker["loop"] or 0.0
    state.last_consumed = lambda: worker["consumed"]
    state.lag = lambda: lag
    state.start()
    return state, worker


def gauge(m: ScorerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"stream": "s", **labels})


def test_empty_polls_with_lag_are_a_stall_after_stall_s(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    metrics = ScorerMetrics(stream="s", model="m")
    state, worker = running(clock, {("data.s", 0): 59_170, ("data.s", 1): 0}, metrics=metrics)
    worker["consumed"] = clock.t
    with caplog.at_level(logging.INFO, "headrace.scorers.engine.probing"):
        for _ in range(59):  # polls keep returning nothing: the loop turns, nothing consumed
            clock.t += 1.0
            worker["loop"] = clock.t
            assert state.live()[0] and state.ready()[0]
        clock.t += 2.0
        worker["loop"] = clock.t
        live_ok, live = state.live()
        ready_ok, ready = state.ready()
        for _ in range(10):  # the probes keep asking: the log says it once
            state.live()
            state.ready()
    assert not live_ok and not ready_ok
    assert live["reason_code"] == ready["reason_code"] == "stalled"
    assert "consumed nothing for 61s" in str(ready["reason"])
    assert "1 assigned partition(s) hold 59170 unconsumed records" in str(ready["reason"])
    assert live["since_consumed_s"] == 61.0 and live["since_loop_s"] == 0.0
    failing = [r for r in caplog.records if "failing" in r.getMessage()]
    assert len(failing) == 2  # one for /livez, one for /readyz
    assert gauge(metrics, "headrace_scorer_stalled") == 1
    assert gauge(metrics, "headrace_scorer_probe_failing", probe="ready", reason="stalled") == 1
    assert gauge(metrics, "headrace_scorer_ready") == 0
    # Consuming again: both recover, said once.
    worker["consumed"] = clock.t
    caplog.clear()
    with caplog.at_level(logging.INFO, "headrace.scorers.engine.probing"):
        assert state.live()[0] and state.ready()[0]
        assert state.live()[0] and state.ready()[0]
    assert sum("ok again" in r.getMessage() for r in caplog.records) == 2
    assert gauge(metrics, "headrace_scorer_stalled") == 0
    assert gauge(metrics, "headrace_scorer_probe_failing", probe="ready", reason="stalled") == 0


def test_a_stall_names_what_the_loop_is_retrying() -> None:
    """Found on Apache Kafka (ISR under min.insync.replicas): the scorer stalled retrying the
    flush of its refused outputs, and the probes said only "consumed nothing", not why."""
    clock = Clock()
    state, worker = running(clock, {("data.s", 0): 451}, stall_s=4.0)
    worker["consumed"] = clock.t
    retry: list[tuple[float, str]] = [(clock.t - 1.0, "flush failed: an old one")]
    state.last_retry = lambda: retry[-1]
    clock.t += 5.0
    worker["loop"] = clock.t
    assert "retrying" not in str(state.ready()[1]["reason"])  # before it last consumed
    retry.append((clock.t - 0.5, "flush failed: 256 messages not acknowledged within 10.0s"))
    reason = str(state.ready()[1]["reason"])
    assert reason.startswith("stalled: consumed nothing for 5s")
    assert reason.endswith("; the loop is retrying: flush failed: 256 messages not "
                           "acknowledged within 10.0s"), reason
    clock.t += 10.0  # a retry older than the stall window is not today's cause
    worker["loop"] = clock.t
    assert "retrying" not in str(state.live()[1]["reason"])


def test_idle_without_lag_is_not_a_stall() -> None:
    clock = Clock()
    state, worker = running(clock, {("data.s", 0): 0})
    clock.t += 3600
    worker["loop"] = clock.t
    assert state.live()[0] and state.ready()[0]  # nothing to read: idle, not stalled


def test_unknown_lag_is_not_a_stall() -> None:
    clock = Clock()
    state, worker = running(clock, None)  # the broker did not answer the lag check
    clock.t += 3600
    worker["loop"] = clock.t
    assert state.ready()[0]


def test_a_scorer_that_never_consumed_stalls_from_its_start() -> None:
    clock = Clock()
    state, worker = running(clock, {("data.s", 2): 5})
    clock.t += 61
    worker["loop"] = clock.t
    assert state.ready()[1]["reason_code"] == "stalled"


def test_a_stuck_loop_fails_liveness_only() -> None:
    clock = Clock()
    state, _ = running(clock, {})
    clock.t += 31
    ok, body = state.live()
    assert not ok and body["reason_code"] == "loop_stuck"


def test_readiness_says_what_the_model_is_doing() -> None:
    clock = Clock()
    metrics = ScorerMetrics(stream="s", model="m")
    state = ProbeState(liveness_s=30, clock=clock, metrics=metrics)
    assert state.live()[0]  # starting: the startup probe covers loading
    state.phase = "loading model m:3"
    ok, body = state.ready()
    assert not ok and body["phase"] == "loading model m:3" and body["reason_code"] == "loading"
    assert body["reason"] == "no model yet: loading model m:3"
    assert gauge(metrics, "headrace_scorer_probe_failing", probe="ready", reason="loading") == 1
    state.phase = "warming m:3"
    assert state.ready()[1]["phase"] == "warming m:3"
    state.phase = "waiting for a loadable production version of model m"
    assert state.ready()[1]["reason_code"] == "no_model"
    state.model_ready = lambda: True
    assert state.ready()[1]["reason_code"] == "starting"
    state.start()
    assert state.ready()[1]["reason_code"] == "no_partitions"
    state.assigned = lambda: 1
    assert state.ready()[0]
    state.stopping = True
    assert state.ready()[1]["reason_code"] == "stopping"


def test_the_lag_watch_forgets_an_old_snapshot() -> None:
    clock = Clock()
    answers: list[Lag | Exception] = [{("t", 0): 7}, RuntimeError("broker gone")]

    def source() -> Lag:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    watch = LagWatch(source, every_s=5.0, clock=clock)
    watch.refresh()
    assert watch.snapshot() == {("t", 0): 7}
    clock.t += 10
    watch.refresh()  # fails: the snapshot ages
    assert watch.snapshot() == {("t", 0): 7}
    clock.t += 11
    assert watch.snapshot() is None  # too old to say anything


def test_the_stall_check_counts_only_the_partitions_owned_now(conn: KafkaConnection,
                                                              topic_factory: Any) -> None:
    """A partition revoked (scale-out) is another member's: its growing lag must not make this
    scorer look stalled while it owns nothing."""
    topic = topic_factory(partitions=2)
    io = StreamIO(conn, BatchConsumer(conn, group_id=f"g-{topic}", topics=[topic],
                                      partitions=[0]))
    try:
        io.lag()  # the loop's periodic read: records the positions
        io._consumer.positions_seen = {(topic, 0): 3, (topic, 1): 0}  # 1: revoked since
        assert io.positions_seen() == {(topic, 0): 3}
        lag = GroupLag(conn, f"g-{topic}")
        assert lag({(topic, 0): 0}) == {(topic, 0): 0}  # an empty topic: nothing behind
    finally:
        io.close(timeout_s=1.0)


def test_holding_nothing_while_the_group_commits_nothing_and_records_wait_is_a_stall() -> None:
    """Seen after a broker restart (D43): both scorers of a group held no partition for minutes,
    nothing committed and thousands of records waiting, each /livez green (readiness said only
    "no partitions assigned", which a member of a group larger than its topic says too)."""
    clock = Clock()
    state, worker = running(clock, None, stall_s=60.0)
    held = [0]
    state.assigned = lambda: held[0]
    view = {("data.s", 0): (0, 686), ("data.s", 1): (0, 691)}  # nothing committed yet
    watch = GroupStandstill(lambda: view, lambda: held[0], clock=clock)
    state.group_standstill = watch.standstill
    watch.refresh()
    for _ in range(6):  # a minute: the group may be rebalancing
        clock.t += 10.0
        worker["loop"] = clock.t
        watch.refresh()
        assert state.live()[0]
    clock.t += 1.0
    worker["loop"] = clock.t
    live_ok, live = state.live()
    ready = state.ready()[1]
    assert not live_ok and live["reason_code"] == ready["reason_code"] == "stalled"
    assert ("holding no partition while the group has committed nothing for 61s" in
            str(ready["reason"])), ready
    assert "1377 records wait" in str(ready["reason"])
    # The group commits again (another member reads them): not this member's stall.
    view = {("data.s", 0): (300, 700), ("data.s", 1): (0, 700)}
    watch.refresh()
    assert state.live()[0]
    # Holding partitions: its own lag says how it does.
    held[0] = 1
    watch.refresh()
    assert watch.standstill() is None


def test_an_idle_member_of_an_idle_group_is_not_stalled() -> None:
    clock = Clock()
    state, worker = running(clock, None)
    state.assigned = lambda: 0
    watch = GroupStandstill(lambda: {("data.s", 0): (50, 50)}, lambda: 0, clock=clock)
    state.group_standstill = watch.standstill
    watch.refresh()
    clock.t += 3600
    worker["loop"] = clock.t
    watch.refresh()
    assert state.live()[0]
    assert state.ready()[1]["reason_code"] == "no_partitions"


def test_the_group_view_reads_the_log_start_where_nothing_is_committed(
        conn: KafkaConnection, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    produce_all(conn, topic, [(b"{}", None)] * 5,  # round-robin: 3 and 2
                **{"linger.ms": 0, "batch.num.messages": 1})  # Tansu: exact ends
    view = GroupLag(conn, f"g-{topic}").topic_view(topic)
    assert view == {(topic, 0): (0, 3), (topic, 1): (0, 2)}
    assert GroupLag(conn, f"g-{topic}").topic_view("no-such-topic") == {}
