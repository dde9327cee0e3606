"""The scorer on the embedded broker reading Avro, Protobuf and JSON Schema records whose schemas
live in the run's registry (tests/real_registry.py: Apicurio, else the stand-in): registered
through the client, fetched by the scorer by id, three Avro schema versions in one stream.
What Kafka holds is asserted: predictions for every good record, dead letters with the schema id.
"""

from __future__ import annotations

import json
from pathlib import Path

from headrace.core.settings import Settings
from headrace.scorers.wire import protobuf_columns
from headrace.streams import dlq
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.schema_registry import RegistryConfig, SchemaRegistry, frame
from headrace.streams.topics import catalog, data_topic, dlq_topic, predictions_topic
from tests.real_registry import RunningRegistry
from tests.scorers.conftest import FEATURES, publish_tf, read_topic, ready_scorer, rows
from tests.scorers.registry_helpers import avro_body

V1 = {"type": "record", "name": "Row", "namespace": "e2e", "fields": [
    {"name": f, "type": "double"} for f in FEATURES]}
V2 = {**V1, "fields": [*V1["fields"],
                       {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "meta", "type": ["null", {
    "type": "record", "name": "Meta", "fields": [{"name": "src", "type": "string"}]}],
    "default": None}]}
PROTO = ('syntax = "proto3"; package e2e; message Row { '
         + " ".join(f"double {f} = {j + 1};" for j, f in enumerate(FEATURES)) + " }")
JSON_SCHEMA = {"type": "object", "properties": {f: {"type": "number"} for f in FEATURES}}


def test_records_of_every_format_are_scored_through_the_registry(
        settings: Settings, conn: KafkaConnection, dfs: Path,
        schema_registry: RunningRegistry) -> None:
    stream = settings.streams[0]
    data = data_topic(stream)
    ensure_topics(conn, catalog(settings), replication_factor=1)
    mv = publish_tf(dfs, stream)
    client = SchemaRegistry(RegistryConfig(url=schema_registry.url, timeout_s=5.0))
    subject = f"{data}-value"
    ids = [client.register(subject, json.dumps(v)) for v in (V1, V2, V3)]
    proto_id = client.register(f"{data}-proto-value", PROTO, "PROTOBUF")
    json_id = client.register(f"{data}-json-value", json.dumps(JSON_SCHEMA), "JSON")
    assert len({*ids, proto_id, json_id}) == 5
    row_cls = protobuf_columns.compile_schema(PROTO)._classes[(0,)]
    good = rows(25, seed=8)
    values: list[tuple[str, bytes]] = []
    for i, r in enumerate(good):
        kind = i % 5
        if kind < 3:
            extra = {} if kind == 0 else {"note": "n"} if kind == 1 else {"meta": {"src": "s"}}
            value = frame(ids[kind], avro_body((V1, V2, V3)[kind], {**r, **extra}))
        elif kind == 3:
            value = frame(proto_id, b"\x00" + row_cls(**r).SerializeToString())
        else:
            value = frame(json_id, json.dumps(r).encode())
        values.append((f"g{i}", value))
    unknown = max([*ids, proto_id, json_id]) + 1000
    bad = {"unknown": frame(unknown, b"\x02"), "cut": frame(ids[0], avro_body(V1, good[0])[:-1])}
    p = make_producer(conn)
    for key, v in [*values[:10], *bad.items(), *values[10:]]:
        p.produce(data, v, key, partition=0)
    assert p.flush(15) == 0
    fresh = SchemaRegistry(RegistryConfig(url=schema_registry.url, timeout_s=5.0))
    with ready_scorer(settings, conn, schema_source=fresh):
        preds = read_topic(conn, predictions_topic(stream), expect=len(good))
        dead = read_topic(conn, dlq_topic(stream), expect=len(bad))
    got = {json.loads(m.value())["key"] for m in preds}
    assert got == {f"g{i}" for i in range(len(good))}
    assert {json.loads(m.value())["model_version"] for m in preds} == {mv.version}
    letters = {m.key().decode(): hdr.to_dict(m.headers()) for m in dead}
    assert sorted(letters) == ["cut", "unknown"]
    assert letters["unknown"][dlq.DLQ_SCHEMA_ID] == str(unknown)
    assert f"schema id {unknown} is unknown" in letters["unknown"][dlq.DLQ_ERROR_MESSAGE]
    assert letters["cut"][dlq.DLQ_SCHEMA_ID] == str(ids[0])
    assert fresh.fetches == 6  # five schemas and the unknown id, each asked once
