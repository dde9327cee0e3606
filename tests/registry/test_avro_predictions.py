"""Predictions in Avro (HEADRACE_SCORER_OUTPUT_FORMAT=avro): what the predictions topic holds is
the Schema Registry wire format under the schema registered for predictions.<stream>-value, and
confluent-kafka's AvroDeserializer (a reader we did not write) reads it."""

from __future__ import annotations

import io
import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest

from headrace.core.ports import free_port
from headrace.core.settings import Settings
from headrace.scorers.wire.avro_predictions import AvroPredictions, avro_names, prediction_schema
from headrace.scorers.wire.predictions import Columns, Source
from headrace.store.signature import ModelOutput, OutputKind
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.schema_registry import (
    AVRO_WIRE,
    RegistryConfig,
    SchemaRegistry,
    unframe,
    wire_schema_id,
)
from headrace.streams.topics import catalog, data_topic, dlq_topic, predictions_topic
from tests.fixtures import read_all
from tests.real_registry import RunningRegistry
from tests.scorers.conftest import CLASSES, publish_tf, read_topic, rows, score, send_json
from tools.registry_standin import StandinRegistry


def _deserializer(url: str) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    return AvroDeserializer(SchemaRegistryClient({"url": url}))


def _read(deser: Any, topic: str, value: bytes) -> dict[str, Any]:
    from confluent_kafka.serialization import MessageField, SerializationContext

    got: dict[str, Any] = deser(value, SerializationContext(topic, MessageField.VALUE))
    return got


def _latest(url: str, subject: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/subjects/{subject}/versions/latest", timeout=5) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body


@pytest.mark.slow
def test_a_scorer_writes_avro_predictions_that_confluents_deserializer_reads(
        settings: Settings, conn: KafkaConnection, dfs: Path,
        schema_registry: RunningRegistry) -> None:
    s = settings.with_overrides(schema_registry_url=schema_registry.url)
    stream = s.streams[0]
    ensure_topics(conn, catalog(s))
    mv = publish_tf(dfs, stream)
    keys = send_json(conn, data_topic(stream), rows(300))
    msgs, _ = score(s, conn, expect=300, output_format="avro")
    assert len(msgs) == 300
    topic = predictions_topic(stream)
    ids = {wire_schema_id(m.value()) for m in msgs}
    assert len(ids) == 1 and None not in ids
    (sid,) = ids
    latest = _latest(schema_registry.url, f"{topic}-value")
    assert latest["id"] == sid and json.loads(latest["schema"])["name"] == "Prediction"
    deser = _deserializer(schema_registry.url)
    recs = [_read(deser, topic, m.value()) for m in msgs]
    assert sorted(r["key"] for r in recs) == sorted(keys)
    assert all(m.key().decode() == r["key"] for m, r in zip(msgs, recs, strict=True))
    assert len({(r["source_partition"], r["source_offset"]) for r in recs}) == 300
    for r in recs:
        assert r["model_name"] == stream and r["model_version"] == mv.version
        assert r["source_topic"] == data_topic(stream) and len(r["scores"]) == len(CLASSES)
        assert abs(sum(r["scores"]) - 1.0) < 1e-4
        assert r["label"] == CLASSES[int(np.argmax(r["scores"]))]
    assert {hdr.get(m.headers(), hdr.CONTENT_TYPE) for m in msgs} == {AVRO_WIRE}
    assert read_all(conn, dlq_topic(stream)) == []


def test_avro_output_without_a_registry_or_an_unknown_format_is_a_config_error() -> None:
    from headrace.core.errors import ConfigError
    from headrace.scorers.wire.output_formats import FormatContext, build_format

    with pytest.raises(ConfigError, match="HEADRACE_SCHEMA_REGISTRY_URL"):
        build_format("avro", FormatContext("predictions.x", None))
    with pytest.raises(ConfigError, match="unknown output format 'xml'"):
        build_format("xml", FormatContext("predictions.x", None))
    assert build_format("json", FormatContext("predictions.x", None)).encode([b"{}"]) == [b"{}"]


def test_a_registry_that_is_away_holds_the_predictions_until_it_returns(
        settings: Settings, conn: KafkaConnection, dfs: Path) -> None:
    # The registry is a stand-in started late on the port the scorer was given: what is under
    # test is the scorer's wait (nothing dead-lettered, nothing lost), not the registry.
    port = free_port()  # nothing listens there yet
    s = settings.with_overrides(schema_registry_url=f"http://127.0.0.1:{port}/apis/ccompat/v7",
                                request_timeout_s=1.0)
    stream = s.streams[0]
    ensure_topics(conn, catalog(s))
    publish_tf(dfs, stream)
    send_json(conn, data_topic(stream), rows(50))
    from tests.fixtures import eventually, ready_scorer

    with ready_scorer(s, conn, output_format="avro") as scorer:
        eventually(lambda: scorer.worker is not None and scorer.worker.last_retry is not None,
                   timeout_s=30, what="a registry retry")
        assert "schema registry" in scorer.worker.last_retry[1]
        assert read_all(conn, predictions_topic(stream)) == []
        back = StandinRegistry(port=port).start()
        try:
            msgs = read_topic(conn, predictions_topic(stream), expect=50)
        finally:
            back.stop()
    assert len(msgs) == 50 and all(wire_schema_id(m.value()) for m in msgs)
    assert read_all(conn, dlq_topic(stream)) == []


def _columns(names: list[str], n: int = 4) -> Columns:
    outs = [(ModelOutput(name=nm, kind=OutputKind.CLASSES, classes=("a", "b")),
             np.tile(np.array([[0.25, 0.75]], np.float32), (n, 1))) for nm in names]
    src = Source(keys=[f"k{i}".encode() for i in range(n)], topics=["data.x"] * n,
                 partitions=np.zeros(n, np.int64), offsets=np.arange(n, dtype=np.int64),
                 rows=np.zeros(n, np.int64))
    return Columns(outs, src, model_name="m", model_version=3, top_k=1)


def test_the_schema_evolves_compatibly_when_the_models_outputs_change(
        schema_registry: RunningRegistry) -> None:
    topic = f"predictions.s{uuid.uuid4().hex[:8]}"
    client = SchemaRegistry(RegistryConfig(url=schema_registry.url))
    fmt = AvroPredictions(client, topic)
    one = fmt.encode(_columns(["probs"]).json_lines())
    two = fmt.encode(_columns(["probs", "head.2"]).json_lines())
    three = fmt.encode(_columns(["head.2", "third"]).json_lines())
    ids = [wire_schema_id(v[0]) for v in (one, two, three)]
    assert len(set(ids)) == 3
    with urllib.request.urlopen(f"{schema_registry.url}/subjects/{topic}-value/versions",
                                timeout=5) as r:
        assert json.loads(r.read()) == [1, 2, 3]
    # The newest schema reads every older record (BACKWARD), by Avro's own resolution rules.
    newest = fastavro.parse_schema(prediction_schema(["head.2", "third"]))
    for values, names in ((one, []), (two, ["probs", "head.2"])):
        writer = fastavro.parse_schema(prediction_schema(names))
        for v in values:
            _, body = unframe(v)
            rec = fastavro.schemaless_reader(io.BytesIO(bytes(body)), writer, newest)
            assert rec["label"] == "b" and rec["top_k"] == [{"label": "b", "score": 0.75}]
            if names:
                assert rec["outputs"]["head_2"]["label"] == "b" and rec["outputs"]["third"] is None
    deser = _deserializer(schema_registry.url)
    rec = _read(deser, topic, three[0])
    assert rec["outputs"]["third"]["scores"] == [0.25, 0.75] and rec["key"] == "k0"


def test_a_schema_that_breaks_compatibility_is_refused_by_a_real_registry() -> None:
    from tests.real_registry import apicurio

    url = apicurio().url
    topic = f"predictions.s{uuid.uuid4().hex[:8]}"
    client = SchemaRegistry(RegistryConfig(url=url))
    AvroPredictions(client, topic).encode(_columns(["probs"]).json_lines())
    from headrace.streams.schema_registry import SchemaRejected

    breaking = json.dumps({"type": "record", "name": "Prediction", "namespace": "headrace",
                           "fields": [{"name": "required_new", "type": "string"}]})
    with pytest.raises(SchemaRejected):
        client.register(f"{topic}-value", breaking)


def test_output_names_become_distinct_avro_fields() -> None:
    assert avro_names(["a", "a/b", "a.b", "1x", ""]) == {
        "a": "a", "a/b": "a_b", "a.b": "a_b_2", "1x": "_1x", "": "_"}
