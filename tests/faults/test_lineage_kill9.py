"""The lineage index is as durable as the predictions: after a scorer is killed with SIGKILL
mid-stream and restarted, the index's ranges cover exactly the offsets that have a
prediction (the batch in flight at the kill is re-scored, and its range written again)."""

from __future__ import annotations

import json
import time

import pytest

from headrace.ops import lineage
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from tests.faults.conftest import needs_scorer
from tests.faults.harness import LoadGenerator, Scorers, Stream, TopicReader, figures, wait_covered
from tests.fixtures import eventually

pytestmark = [pytest.mark.slow, needs_scorer]


def _covered(ranges: list[tuple[int, int, int]]) -> set[tuple[int, int]]:
    return {(p, o) for p, first, last in ranges for o in range(first, last + 1)}


def test_after_a_kill_9_the_index_covers_exactly_the_predicted_offsets(
        conn: KafkaConnection, stream: Stream, scorers: Scorers, model: str) -> None:
    s = scorers.start(batch_size=128)
    s.wait_ready()
    load = LoadGenerator(conn, stream, rate=150, total=1200).start()
    early = TopicReader(conn, stream.predictions)
    eventually(lambda: early.poll(0.3) >= 0 and len(early.records) >= 200, timeout_s=60,
               what="the first scorer's predictions")
    time.sleep(0.5)  # mid-stream: batches are in flight
    s.kill9()
    s = scorers.start(batch_size=128)
    s.wait_ready()
    load.join()
    preds = TopicReader(conn, stream.predictions)
    wait_covered(preds, load.all_acked, data_topic=stream.data, timeout_s=40.0)
    preds.drain(idle_s=1.0)
    rc, _ = s.terminate()
    predicted = set()
    for r in preds.records:
        p = json.loads(r.value)
        predicted.add((p["source_partition"], p["source_offset"]))
    ranges = lineage.scored_ranges(conn, ControlTopics(), model, 1, stream=stream.name)
    spans = [(r.partition, r.first, r.last) for r in ranges]
    raw = [r for r in lineage.read_index(conn, ControlTopics().lineage)
           if r.stream == stream.name]
    figures("lineage_kill9", predictions=len(preds.records), offsets=len(predicted),
            predicted_before_kill=len(early.records), ranges=len(spans),
            ranges_before_merging=len(raw))
    # The restarted scorer opened ranges of its own (it cannot know where the dead one's
    # ended); shown merged where they touch or overlap.
    assert len(raw) > len({p for p, _ in predicted})
    assert rc == 0
    assert predicted == load.all_acked()
    assert _covered(spans) == predicted
    assert {r.role.value for r in ranges} == {"production"}
