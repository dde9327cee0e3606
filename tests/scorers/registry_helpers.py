"""Schema Registry wire-format records for tests: bodies made by fastavro's writer, Protobuf's
runtime and JSON, framed as Confluent's serializers frame them; schemas given directly."""

from __future__ import annotations

import io
import json
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from headrace.core.errors import PermanentError, RetriableError
from headrace.streams.consuming import RawBatch


def frame(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


def avro_body(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


@dataclass(frozen=True)
class Schema:
    schema_type: str
    schema_str: str


class Schemas:
    """Schemas by id, as a registry client gives them (``fetch_schema``); ``down`` makes it
    answer as an unreachable registry does (``RetriableError``). Counts the fetches."""

    def __init__(self, schemas: dict[int, tuple[str, Any]]) -> None:
        self.schemas = {i: Schema(t, s if isinstance(s, str) else json.dumps(s))
                        for i, (t, s) in schemas.items()}
        self.down = threading.Event()
        self.fetches: list[int] = []

    def fetch_schema(self, schema_id: int) -> Schema:
        self.fetches.append(schema_id)
        if self.down.is_set():
            raise RetriableError("schema registry at http://127.0.0.1:1: unreachable")
        if schema_id not in self.schemas:
            raise PermanentError(f"unknown schema id {schema_id} (404)")
        return self.schemas[schema_id]


def batch(values: list[bytes]) -> RawBatch:
    n = len(values)
    return RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.t"] * n,
                    np.zeros(n, np.int32), np.arange(n, dtype=np.int64), np.zeros(n, np.int64),
                    [None] * n)
