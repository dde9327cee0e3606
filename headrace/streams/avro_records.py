"""Records as Avro in the Schema Registry wire format: ``headrace send --format avro --schema
FILE.avsc`` writes a JSONL file's records under a registered schema, and ``headrace tail``
shows such records decoded, with their schema ids.

The schema is registered under ``<topic>-value`` (TopicNameStrategy). The whole file is checked
against it before the first record is produced: a record that does not fit is named by its line
(nothing sent, unless the caller sends the good ones and sets the bad aside).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from fastavro.validation import validate

from headrace.core.errors import ValidationFailed
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import BatchProducer
from headrace.streams.schema_registry import (
    AVRO_WIRE,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRegistry,
    frame,
    wire_schema_id,
)
from headrace.streams.sending import BadLine, ReadRecords, SendResult


@dataclass(frozen=True)
class AvroFile:
    """A JSONL file's records checked against an Avro schema."""

    schema_str: str
    parsed: Any
    records: list[dict[str, Any]]
    bad: tuple[BadLine, ...]


def read_schema(path: Path) -> tuple[str, Any]:
    """An .avsc file's text and parsed form; ``ValidationFailed`` naming what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
        parsed = fastavro.parse_schema(json.loads(text))
    except OSError as exc:
        raise ValidationFailed(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed(f"{path.name}: not JSON: {str(exc).splitlines()[0][:200]}"
                               ) from None
    except (fastavro.schema.SchemaParseException, fastavro.schema.UnknownType, TypeError,
            KeyError, AttributeError) as exc:
        raise ValidationFailed(f"{path.name}: not an Avro schema: {str(exc)[:200]}") from None
    return text, parsed


def read_avro_file(path: Path, schema_path: Path) -> AvroFile:
    """A JSONL file's records, each checked against the schema (bad ones named by line)."""
    schema_str, parsed = read_schema(schema_path)
    if path.suffix.lower() not in (".jsonl", ".ndjson", ".json") or not path.is_file():
        raise ValidationFailed(f"{path.name}: --format avro sends a .jsonl file")
    good: list[dict[str, Any]] = []
    bad: list[BadLine] = []
    try:
        with path.open(encoding="utf-8") as f:
            for n, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    bad.append(BadLine(n, f"not JSON: {exc.msg} at column {exc.colno}", text))
                    continue
                if not isinstance(obj, dict):
                    bad.append(BadLine(n, "not a JSON object", text))
                    continue
                try:
                    validate(obj, parsed, raise_errors=True)
                except (fastavro.validation.ValidationError, ValueError, TypeError) as exc:
                    bad.append(BadLine(n, f"does not fit the schema: {_why(exc)}", text))
                    continue
                good.append(obj)
    except UnicodeDecodeError:
        raise ValidationFailed(f"{path.name}: not UTF-8 text") from None
    if not good and not bad:
        raise ValidationFailed(f"{path.name}: holds no records")
    return AvroFile(schema_str, parsed, good, tuple(bad))


def _why(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    text = str(errors[0]) if errors else str(exc)
    return " ".join(text.split())[:200]


def as_read_records(got: AvroFile) -> ReadRecords:
    """The bad lines in ``sending``'s form (its message and side file)."""
    import pyarrow as pa

    return ReadRecords(pa.table({"n": pa.array(range(len(got.records)))}), got.bad)


def send_avro(conn: KafkaConnection, topic: str, got: AvroFile, registry: SchemaRegistry, *,
              key_column: str | None = None) -> tuple[SendResult, int]:
    """Register the schema under ``<topic>-value`` and produce every good record in the wire
    format: (what was sent, the schema id)."""
    schema_id = registry.register(f"{topic}-value", got.schema_str)
    headers = hdr.build({hdr.CONTENT_TYPE: AVRO_WIRE})
    producer = BatchProducer(conn)
    buf = io.BytesIO()
    head = frame(schema_id, b"")
    for n, rec in enumerate(got.records, 1):
        buf.seek(0)
        buf.truncate()
        buf.write(head)
        fastavro.schemaless_writer(buf, got.parsed, rec)
        key = rec.get(key_column) if key_column else rec.get("key")
        producer.produce(topic, buf.getvalue(), None if key is None else str(key), headers)
        if n % 50_000 == 0:
            producer.poll()
    producer.flush(max(conn.timeout_s, 30.0))
    return SendResult(topic, len(got.records), len(got.records)), schema_id


class WireDecoder:
    """Decodes wire-format values for display: Avro and JSON Schema records in full, others
    named; each schema fetched once (the client caches it)."""

    def __init__(self, registry: SchemaRegistry | None) -> None:
        self.registry = registry
        self._parsed: dict[int, Any] = {}

    def decode(self, value: bytes) -> Any:
        sid = wire_schema_id(value)
        assert sid is not None
        if self.registry is None:
            return (f"<schema registry wire format, schema id {sid}: set "
                    "HEADRACE_SCHEMA_REGISTRY_URL to decode>")
        try:
            kind, text, _refs = self.registry.fetch_schema(sid)
        except (SchemaNotFound, RegistryUnavailable) as exc:
            return f"<schema id {sid}: {exc}>"
        body = memoryview(value)[5:]
        try:
            if kind == "AVRO":
                parsed = self._parsed.get(sid)
                if parsed is None:
                    parsed = self._parsed[sid] = fastavro.parse_schema(json.loads(text))
                return fastavro.schemaless_reader(io.BytesIO(body), parsed, None)
            if kind == "JSON":
                return json.loads(bytes(body))
        except Exception as exc:  # any bytes may carry a known id
            return f"<schema id {sid}: undecodable {kind}: {str(exc)[:200] or repr(exc)}>"
        return f"<{kind} record, schema id {sid}, {len(body)} bytes>"
