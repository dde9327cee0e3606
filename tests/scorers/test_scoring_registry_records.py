"""A scorer on the embedded broker reading Schema Registry wire-format records beside JSON: what
the predictions and dead-letter topics hold, and a registry that stops answering (the scorer
holds its partitions, dead-letters nothing, and scores everything once it answers again).

The schemas come from an in-process source with the registry client's interface
(``registry_helpers.Schemas``); tests/registry/test_scoring_wire_records.py runs the same path
against the suite's registry.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from headrace.core.settings import Settings
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, make_producer
from headrace.streams.topics import dlq_topic, predictions_topic
from tests.fixtures import read_all
from tests.scorers.conftest import FEATURES, eventually, publish_tf, read_topic, ready_scorer, rows
from tests.scorers.registry_helpers import Schemas, avro_body, frame

V1: dict[str, Any] = {"type": "record", "name": "Row", "fields": [
    {"name": f, "type": "double"} for f in FEATURES]}
# v2: a new optional field and a nested record; v3: "d" left out.
V2 = {"type": "record", "name": "Row", "fields": [
    *V1["fields"], {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "meta", "type": {"type": "record", "name": "Meta", "fields": [
        {"name": "src", "type": "string"}]}}]}
V3 = {"type": "record", "name": "Row", "fields": [f for f in V1["fields"] if f["name"] != "d"]}


def _send(conn: KafkaConnection, topic: str, values: list[tuple[str, bytes]]) -> None:
    p = make_producer(conn)
    for key, v in values:
        p.produce(topic, v, key, partition=0)
    assert p.flush(15) == 0


def test_wire_records_score_beside_json_and_bad_ones_carry_their_schema_id(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    mv = publish_tf(dfs, stream)
    schemas = Schemas({1: ("AVRO", V1), 2: ("AVRO", V2), 3: ("AVRO", V3)})
    good = rows(30, seed=4)
    values: list[tuple[str, bytes]] = []
    for i, r in enumerate(good):
        if i % 3 == 0:
            values.append((f"g{i}", frame(1, avro_body(V1, r))))
        elif i % 3 == 1:
            values.append((f"g{i}", frame(2, avro_body(V2, {**r, "meta": {"src": "x"}}))))
        else:
            values.append((f"g{i}", json.dumps(r).encode()))
    bad = [("unknown", frame(77, b"\x02")),
           ("lacks-d", frame(3, avro_body(V3, {f: 1.0 for f in FEATURES[:3]}))),
           ("cut", frame(1, avro_body(V1, good[0])[:-2]))]
    values[5:5] = bad
    _send(conn, data, values)
    with ready_scorer(settings, conn, schema_source=schemas):
        preds = read_topic(conn, predictions_topic(stream), expect=len(good))
        dead = read_topic(conn, dlq_topic(stream), expect=len(bad))
    got = {json.loads(m.value())["key"]: json.loads(m.value()) for m in preds}
    assert sorted(got) == sorted(f"g{i}" for i in range(len(good)))
    assert {p["model_version"] for p in got.values()} == {mv.version}
    # In order: each predictions partition follows its inputs' offsets.
    for part in {m.partition() for m in preds}:
        offsets = [json.loads(m.value())["source_offset"] for m in preds
                   if m.partition() == part]
        assert offsets == sorted(offsets)
    letters = {m.key().decode(): hdr.to_dict(m.headers()) for m in dead}
    assert sorted(letters) == ["cut", "lacks-d", "unknown"]
    assert letters["unknown"][dlq.DLQ_SCHEMA_ID] == "77"
    assert "schema id 77 is unknown" in letters["unknown"][dlq.DLQ_ERROR_MESSAGE]
    assert letters["lacks-d"][dlq.DLQ_SCHEMA_ID] == "3"
    assert "has no field(s) ['d']" in letters["lacks-d"][dlq.DLQ_ERROR_MESSAGE]
    assert letters["cut"][dlq.DLQ_SCHEMA_ID] == "1"
    assert "does not decode" in letters["cut"][dlq.DLQ_ERROR_MESSAGE]
    by_key = dict(bad)
    assert {m.key().decode(): m.value() for m in dead} == by_key  # the original bytes


def test_a_registry_that_stops_answering_holds_the_stream_and_loses_nothing(
        settings: Settings, conn: KafkaConnection, dfs: Path, data: str, stream: str) -> None:
    publish_tf(dfs, stream)
    schemas = Schemas({1: ("AVRO", V1), 2: ("AVRO", V2)})
    before = rows(20, seed=5)
    after = rows(20, seed=6)
    with ready_scorer(settings, conn, schema_source=schemas) as scorer:
        _send(conn, data, [(f"a{i}", frame(1, avro_body(V1, r))) for i, r in enumerate(before)])
        read_topic(conn, predictions_topic(stream), expect=len(before))
        schemas.down.set()  # schema id 2 is new: the scorer must ask, and cannot
        _send(conn, data, [(f"b{i}", frame(2, avro_body(V2, {**r, "meta": {"src": "s"}})))
                           for i, r in enumerate(after)])
        reg = scorer.metrics.registry
        eventually(lambda: (reg.get_sample_value("headrace_scorer_retries_total", {
            "stream": stream, "what": "schema_registry"}) or 0) >= 3, timeout_s=30,
            what="the scorer to retry the registry")
        assert scorer.worker is not None and scorer.worker.last_retry is not None
        assert "schema id 2" in scorer.worker.last_retry[1]
        time.sleep(1.0)
        assert len(read_all(conn, predictions_topic(stream))) == len(before)  # held
        assert read_all(conn, dlq_topic(stream)) == []
        schemas.down.clear()
        preds = read_topic(conn, predictions_topic(stream), expect=len(before) + len(after))
    keys = sorted(json.loads(m.value())["key"] for m in preds)
    assert keys == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    assert read_all(conn, dlq_topic(stream)) == []
