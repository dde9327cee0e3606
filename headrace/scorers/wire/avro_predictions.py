"""Predictions as Avro records in the Schema Registry wire format (``output_format=avro``).

The schema follows the JSON Prediction field for field (``key``, ``source_*``, ``model_*``,
``scores``, ``label``, ``row``, ``schema_version``, optional ``top_k``) and, for a model with
several outputs, an ``outputs`` record with one optional field per output name. It is
registered under ``predictions.<stream>-value`` (TopicNameStrategy) with the subject's
compatibility set to BACKWARD: every field a model's outputs add or drop is optional with a
null default, so each new schema reads every older record and the registry accepts it as a new
version. A schema is registered once per set of output names a process meets (cached).

Rows are converted from the JSON predictions the scorer already built (one msgspec decode and
one fastavro write a row): the JSON encoder stays the single source of the fields.
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Sequence
from typing import Any

import fastavro
import msgspec

from headrace.streams import headers as hdr
from headrace.streams.schema_registry import AVRO_WIRE, SchemaRegistry, SchemaRejected, frame

NAMESPACE = "headrace"
COMPATIBILITY = "BACKWARD"
HEADERS: list[tuple[str, bytes]] = hdr.build(
    {hdr.CONTENT_TYPE: AVRO_WIRE, hdr.SCHEMA: "headrace.prediction", hdr.SCHEMA_VERSION: 1})

_decode = msgspec.json.Decoder().decode
_NAME_RE = re.compile(r"[^A-Za-z0-9_]")


def subject(topic: str) -> str:
    """The TopicNameStrategy subject of a topic's values."""
    return f"{topic}-value"


def avro_names(names: Sequence[str]) -> dict[str, str]:
    """Each output name as a distinct Avro field name (other characters become ``_``)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        base = _NAME_RE.sub("_", name) or "_"
        if base[0].isdigit():
            base = "_" + base
        field, n = base, 2
        while field in taken:
            field, n = f"{base}_{n}", n + 1
        taken.add(field)
        out[name] = field
    return out


def _top_k() -> dict[str, Any]:
    return {"type": "array", "items": {
        "type": "record", "name": "TopLabel", "namespace": NAMESPACE,
        "fields": [{"name": "label", "type": "string"}, {"name": "score", "type": "float"}]}}


def prediction_schema(output_names: Sequence[str] = ()) -> dict[str, Any]:
    """The Avro schema of a prediction; ``output_names``: a model's outputs when it has several."""
    fields: list[dict[str, Any]] = [
        {"name": "key", "type": ["null", "string"], "default": None},
        {"name": "source_topic", "type": "string"},
        {"name": "source_partition", "type": "int"},
        {"name": "source_offset", "type": "long"},
        {"name": "model_name", "type": "string"},
        {"name": "model_version", "type": "int"},
        {"name": "scores", "type": {"type": "array", "items": "float"}},
        {"name": "label", "type": ["null", "string"], "default": None},
        {"name": "row", "type": "int", "default": 0},
        {"name": "schema_version", "type": "int", "default": 1},
        {"name": "top_k", "type": ["null", _top_k()], "default": None},
    ]
    if len(output_names) > 1:
        head = {"type": "record", "name": "OutputHead", "namespace": NAMESPACE, "fields": [
            {"name": "scores", "type": {"type": "array", "items": "float"}},
            {"name": "label", "type": ["null", "string"], "default": None},
            # TopLabel is defined by the top-level top_k field, before this one.
            {"name": "top_k", "type": ["null", {"type": "array",
                                                "items": f"{NAMESPACE}.TopLabel"}],
             "default": None},
        ]}
        out_fields: list[dict[str, Any]] = []
        for i, (name, field) in enumerate(avro_names(output_names).items()):
            out_fields.append({"name": field, "type": ["null", head if i == 0
                                                       else f"{NAMESPACE}.OutputHead"],
                               "default": None, "doc": name})
        fields.append({"name": "outputs", "default": None, "type": [
            "null", {"type": "record", "name": "Outputs", "namespace": NAMESPACE,
                     "fields": out_fields}]})
    return {"type": "record", "name": "Prediction", "namespace": NAMESPACE, "fields": fields}


class _Written:
    """One registered schema: its id, its parsed form and the output names' fields."""

    def __init__(self, schema_id: int, schema: dict[str, Any], names: dict[str, str]) -> None:
        self.schema_id = schema_id
        self.parsed = fastavro.parse_schema(schema)
        self.names = names
        self.header = frame(schema_id, b"")


class AvroPredictions:
    """JSON predictions to wire-format Avro under the stream's registered prediction schema."""

    name = "avro"
    headers = HEADERS

    def __init__(self, registry: SchemaRegistry, topic: str) -> None:
        self.registry = registry
        self.subject = subject(topic)
        self._written: dict[tuple[str, ...], _Written] = {}
        self._lock = threading.Lock()
        self._configured = False

    def schema_id(self, output_names: Sequence[str] = ()) -> int:
        return self._schema(tuple(output_names) if len(output_names) > 1 else ()).schema_id

    def _schema(self, names: tuple[str, ...]) -> _Written:
        got = self._written.get(names)
        if got is not None:
            return got
        with self._lock:
            got = self._written.get(names)
            if got is None:
                if not self._configured:
                    self.registry.set_compatibility(self.subject, COMPATIBILITY)
                    self._configured = True
                schema = prediction_schema(names)
                sid = self.registry.register(self.subject, json.dumps(schema))
                got = _Written(sid, schema, avro_names(names))
                self._written[names] = got
            return got

    def encode(self, values: list[bytes]) -> list[bytes]:
        """Each JSON prediction as one wire-format Avro value (raises the registry's errors:
        RegistryUnavailable is retriable, SchemaRejected means an incompatible change)."""
        out: list[bytes] = []
        buf = io.BytesIO()
        for value in values:
            rec = _decode(value)
            outputs = rec.get("outputs")
            written = self._schema(tuple(outputs) if outputs else ())
            if outputs:
                rec["outputs"] = {written.names[k]: v for k, v in outputs.items()}
            buf.seek(0)
            buf.truncate()
            buf.write(written.header)
            fastavro.schemaless_writer(buf, written.parsed, rec)
            out.append(buf.getvalue())
        return out


__all__ = ["AvroPredictions", "SchemaRejected", "avro_names", "prediction_schema", "subject"]
