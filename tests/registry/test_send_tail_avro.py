"""`headrace send --format avro --schema FILE.avsc` and `headrace tail` on wire-format records:
what the data topic holds is checked byte for byte and read back with confluent-kafka's
AvroDeserializer, on the embedded broker and on Apache Kafka."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import Record
from headrace.streams.schema_registry import AVRO_WIRE, wire_schema_id
from headrace.streams.topics import data_topic
from tests import real_kafka
from tests.fixtures import read_all
from tests.real_registry import RunningRegistry
from tools.kafka_cluster import KafkaCluster

SCHEMA = {"type": "record", "name": "Reading", "namespace": "t", "fields": [
    {"name": "key", "type": "string"},
    {"name": "x", "type": "double"},
    {"name": "n", "type": ["null", "long"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
]}
RECORDS = [{"key": f"k{i}", "x": i * 0.5, "n": None if i % 3 else i, "tags": ["a"] * (i % 3),
            "kind": "AB"[i % 2]} for i in range(12)]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    data, schema = tmp_path / "r.jsonl", tmp_path / "r.avsc"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def _stream(broker: str) -> str:
    stream = f"s{uuid.uuid4().hex[:8]}"
    assert main(["--bootstrap", broker, "topics", "--create", "--stream", stream]) == 0
    return stream


def _registered(url: str, subject: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/subjects/{subject}/versions/latest", timeout=5) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _confluent_read(url: str, topic: str, values: list[bytes]) -> list[dict[str, Any]]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deser = AvroDeserializer(SchemaRegistryClient({"url": url}))
    return [deser(v, SerializationContext(topic, MessageField.VALUE)) for v in values]


def _send_and_tail(broker: str, conn: KafkaConnection, url: str, files: tuple[Path, Path],
                   capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_SCHEMA_REGISTRY_URL", url)
    stream = _stream(broker)
    topic = data_topic(stream)
    data, schema = files
    assert main(["--bootstrap", broker, "send", stream, str(data), "--format", "avro",
                 "--schema", str(schema)]) == 0
    held: list[Record] = read_all(conn, topic)
    assert len(held) == len(RECORDS)
    latest = _registered(url, f"{topic}-value")
    assert latest is not None and json.loads(latest["schema"]) == SCHEMA
    assert {wire_schema_id(r.value) for r in held} == {latest["id"]}
    assert all(dict(r.headers).get("content-type") == AVRO_WIRE.encode() for r in held)
    got = _confluent_read(url, topic, [r.value for r in held if r.value is not None])
    by_key = {r["key"]: r for r in got}
    assert by_key == {r["key"]: r for r in RECORDS}
    assert all(r.key is not None and by_key[r.key.decode()] for r in held)

    capsys.readouterr()
    assert main(["--bootstrap", broker, "tail", topic, "--from-beginning", "--max",
                 str(len(RECORDS)), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert {line["schema_id"] for line in lines} == {latest["id"]}
    assert {line["value"]["key"]: line["value"] for line in lines} == by_key


def test_send_writes_avro_under_a_registered_schema_and_tail_decodes_it(
        broker: str, conn: KafkaConnection, schema_registry: RunningRegistry,
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _send_and_tail(broker, conn, schema_registry.url, files, capsys, monkeypatch)


@pytest.mark.slow
def test_send_and_tail_avro_on_apache_kafka(
        kafka_cluster: KafkaCluster, schema_registry: RunningRegistry,
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in real_kafka.DURABILITY_ENV.items():
        monkeypatch.setenv(k, v)
    conn = real_kafka.connection(kafka_cluster.bootstrap)
    _send_and_tail(kafka_cluster.bootstrap, conn, schema_registry.url, files, capsys,
                   monkeypatch)


def test_a_record_that_does_not_fit_the_schema_sends_nothing_and_names_its_line(
        broker: str, conn: KafkaConnection, schema_registry: RunningRegistry,
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_SCHEMA_REGISTRY_URL", schema_registry.url)
    stream = _stream(broker)
    data, schema = files
    lines = data.read_text().splitlines()
    lines[4] = json.dumps({**RECORDS[4], "x": "not a number"})
    data.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["--bootstrap", broker, "send", stream, str(data), "--format", "avro",
                 "--schema", str(schema)]) != 0
    said = capsys.readouterr().err
    assert "line 5" in said and "Traceback" not in said
    assert read_all(conn, data_topic(stream)) == []
    assert _registered(schema_registry.url, f"{data_topic(stream)}-value") is None
    # --skip-bad sends the good ones and sets the bad line aside.
    assert main(["--bootstrap", broker, "send", stream, str(data), "--format", "avro",
                 "--schema", str(schema), "--skip-bad"]) == 0
    assert len(read_all(conn, data_topic(stream))) == len(RECORDS) - 1
    assert json.loads(data.with_name("r.bad.jsonl").read_text())["x"] == "not a number"


@pytest.mark.parametrize("args, fragment", [
    (["--format", "avro"], "--format avro and --schema"),
    (["--schema", "x.avsc"], "--format avro and --schema"),
])
def test_avro_and_schema_go_together(broker: str, files: tuple[Path, Path], args: list[str],
                                     fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["--bootstrap", broker, "send", "demo", str(files[0]), *args]) != 0
    said = capsys.readouterr().err
    assert fragment in said and "Traceback" not in said


def test_send_avro_without_a_registry_or_with_a_bad_schema_says_so(
        broker: str, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, schema_registry: RunningRegistry) -> None:
    monkeypatch.delenv("HEADRACE_SCHEMA_REGISTRY_URL", raising=False)
    data, schema = files
    capsys.readouterr()
    assert main(["--bootstrap", broker, "send", "demo", str(data), "--format", "avro",
                 "--schema", str(schema)]) != 0
    assert "HEADRACE_SCHEMA_REGISTRY_URL" in capsys.readouterr().err
    monkeypatch.setenv("HEADRACE_SCHEMA_REGISTRY_URL", schema_registry.url)
    schema.write_text('{"type": "record", "name": "R", "fields": [{"name": "x"}]}')
    assert main(["--bootstrap", broker, "send", "demo", str(data), "--format", "avro",
                 "--schema", str(schema)]) != 0
    said = capsys.readouterr().err
    assert "not an Avro schema" in said and "Traceback" not in said


def test_tail_without_a_registry_names_the_schema_id(
        broker: str, conn: KafkaConnection, schema_registry: RunningRegistry,
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_SCHEMA_REGISTRY_URL", schema_registry.url)
    stream = _stream(broker)
    assert main(["--bootstrap", broker, "send", stream, str(files[0]), "--format", "avro",
                 "--schema", str(files[1])]) == 0
    monkeypatch.delenv("HEADRACE_SCHEMA_REGISTRY_URL")
    capsys.readouterr()
    assert main(["--bootstrap", broker, "tail", data_topic(stream), "--from-beginning",
                 "--max", "1"]) == 0
    shown = capsys.readouterr().out
    assert "schema-id=" in shown and "set HEADRACE_SCHEMA_REGISTRY_URL to decode" in shown
