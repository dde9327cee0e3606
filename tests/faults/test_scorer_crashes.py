"""Scorer processes killed, stopped and scaled under load: no input offset goes unscored."""

from __future__ import annotations

import json
import random
import time

import pytest

from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import (
    LoadGenerator,
    Scorers,
    Stream,
    TopicReader,
    check,
    committed,
    figures,
    wait_covered,
)

pytestmark = [pytest.mark.slow, needs_scorer]
BATCH = 256


def _settle(conn: KafkaConnection, stream: Stream, load: LoadGenerator,
            timeout_s: float = 40.0) -> tuple[TopicReader, TopicReader, float]:
    load.join()
    assert not load.failed, load.failed[:3]
    preds, dlq = TopicReader(conn, stream.predictions), TopicReader(conn, stream.dlq)
    took = wait_covered(preds, load.all_acked, data_topic=stream.data, timeout_s=timeout_s,
                        dlq=dlq)
    preds.drain(idle_s=1.0)
    dlq.drain(idle_s=0.5)
    return preds, dlq, took


def test_kill_9_three_times_under_load_loses_nothing_and_duplicates_agree(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    load = LoadGenerator(conn, stream, rate=150, total=3000).start()
    s = scorers.start(batch_size=BATCH)
    s.wait_ready()
    rnd = random.Random(7)
    committed_at_kill: list[dict[int, int]] = []
    recover: list[float] = []
    for _ in range(3):
        time.sleep(2.0 + rnd.random())  # mid-stream: batches are in flight at ~150 rec/s
        s.kill9()
        committed_at_kill.append(committed(conn, stream.group, stream.data))
        t0 = time.monotonic()
        s = scorers.start(batch_size=BATCH)
        s.wait_ready()
        recover.append(time.monotonic() - t0)
    preds, dlq, tail_s = _settle(conn, stream, load)
    c = check(load.all_acked(), preds.records, dlq.records, data_topic=stream.data)
    rc, _ = s.terminate()
    figures("kill9x3", **c.summary(), recover_s=[round(r, 1) for r in recover],
            tail_s=round(tail_s, 1), final_exit=rc)
    assert not c.missing, f"{len(c.missing)} input offsets have no prediction: {c.missing[:10]}"
    disagree = [c.by_offset[k] for k in c.non_identical[:3]]
    assert not c.non_identical, f"duplicates disagree: {disagree}"
    assert c.dead_letters == 0
    # A duplicate can only come from a batch in flight at a kill: at or after the offset the
    # group had committed when that scorer died, and at most a few batches per kill.
    first = committed_at_kill[0]
    for p, o in c.duplicated_offsets:
        assert o >= first.get(p, 0), (p, o, first)
    assert c.duplicates <= 3 * stream.partitions * 4 * BATCH
    assert rc == 0
    end = committed(conn, stream.group, stream.data)
    highest: dict[int, int] = {}
    for p, o in load.all_acked():
        highest[p] = max(highest.get(p, -1), o)
    assert all(end[p] == highest[p] + 1 for p in highest), (end, highest)


def test_sigterm_under_load_exits_0_in_grace_commits_and_a_second_scorer_takes_over(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    grace = 10.0
    a = scorers.start(grace_s=grace)
    b = scorers.start(grace_s=grace)
    a.wait_ready()
    b.wait_ready()
    load = LoadGenerator(conn, stream, rate=200, total=3000).start()
    time.sleep(3.0)
    rc, exit_s = a.terminate(timeout_s=grace + 10)
    after_exit = committed(conn, stream.group, stream.data)
    preds = TopicReader(conn, stream.predictions)
    # Takeover: the first prediction for an offset at or past what was committed at A's exit,
    # on every partition, tells B owns them all.
    t0 = time.monotonic()
    takeover_s = None
    while time.monotonic() - t0 < 30:
        preds.poll(0.2)
        seen: dict[int, int] = {}
        for r in preds.records:
            p = json.loads(r.value)
            seen[p["source_partition"]] = max(seen.get(p["source_partition"], -1),
                                              p["source_offset"])
        if all(seen.get(p, -1) >= max(o, 0) for p, o in after_exit.items()):
            takeover_s = time.monotonic() - t0
            break
    preds, dlq, _ = _settle(conn, stream, load)
    c = check(load.all_acked(), preds.records, dlq.records, data_topic=stream.data)
    rc_b, _ = b.terminate()
    figures("sigterm", **c.summary(), exit_code=rc, exit_s=round(exit_s, 2),
            takeover_s=None if takeover_s is None else round(takeover_s, 1),
            committed_at_exit=after_exit)
    assert rc == 0, a.log_tail()
    assert exit_s < grace
    assert all(o >= 0 for o in after_exit.values()), f"nothing committed: {after_exit}"
    assert takeover_s is not None, "the second scorer did not take every partition over"
    assert not c.missing, f"gap: {c.missing[:10]}"
    assert not c.non_identical
    assert rc_b == 0


def test_scale_1_to_3_to_1_under_load_loses_nothing(
        conn: KafkaConnection, stream: Stream, scorers: Scorers) -> None:
    load = LoadGenerator(conn, stream, rate=150, total=3000).start()
    first = scorers.start()
    first.wait_ready()
    time.sleep(1.0)
    t0 = time.monotonic()
    extra = [scorers.start(), scorers.start()]
    ready = [p.wait_ready() for p in extra]
    scale_up_s = time.monotonic() - t0
    time.sleep(3.0)
    t1 = time.monotonic()
    codes = [p.terminate()[0] for p in extra]
    scale_down_s = time.monotonic() - t1
    preds, dlq, tail_s = _settle(conn, stream, load)
    c = check(load.all_acked(), preds.records, dlq.records, data_topic=stream.data)
    rc, _ = first.terminate()
    figures("scale_1_3_1", **c.summary(), scale_up_ready_s=round(scale_up_s, 1),
            new_ready_s=[round(r, 1) for r in ready], scale_down_s=round(scale_down_s, 1),
            tail_s=round(tail_s, 1))
    assert codes == [0, 0] and rc == 0
    assert not c.missing, c.missing[:10]
    assert not c.non_identical
