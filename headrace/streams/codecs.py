"""Record codecs for data to score: JSON (one record a message) and Arrow IPC (a batch a message).

Both decode a whole batch of messages to one columnar ``pyarrow.Table`` with no per-row Python
loop on the happy path. When a batch holds a bad message, decoding falls back to one message at a
time so that only the bad ones are rejected, each with its reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.json as pajson

from headrace.core.errors import ValidationFailed
from headrace.core.limits import MAX_RECORD_BYTES
from headrace.streams import headers as hdr


@dataclass
class DecodedBatch:
    """Rows decoded from many messages, with the message each row came from."""

    table: pa.Table
    message_index: np.ndarray  # int64, one per row: index into the input message list
    row_in_message: np.ndarray  # int32, one per row: position inside its message
    errors: list[tuple[int, ValidationFailed]] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)


# Every Arrow IPC stream message starts with this continuation marker; no JSON text can.
ARROW_MAGIC = b"\xff\xff\xff\xff"


def arrow_flags(values: Iterable[bytes]) -> Iterator[bool]:
    """Whether each payload is an Arrow IPC stream, from its bytes alone (headers cost more);
    ``bytes.startswith`` mapped in C costs half a Python function call a value."""
    return map(bytes.startswith, values, repeat(ARROW_MAGIC))


def encode_json(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), allow_nan=False).encode()


def encode_arrow(table: pa.Table | pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return bytes(sink.getvalue().to_pybytes())


def decode_arrow(value: bytes) -> pa.Table:
    if not value:
        raise ValidationFailed("empty Arrow payload", stage="decode")
    if len(value) > MAX_RECORD_BYTES:
        raise ValidationFailed(f"Arrow payload of {len(value)} bytes exceeds the limit",
                               stage="decode")
    try:
        return ipc.open_stream(pa.py_buffer(value)).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise ValidationFailed(f"undecodable Arrow IPC: {exc}", stage="decode") from None


def decode_json_one(value: bytes, schema: pa.Schema | None = None) -> pa.Table:
    if not value or not value.strip():
        raise ValidationFailed("empty JSON payload", stage="decode")
    if len(value) > MAX_RECORD_BYTES:
        raise ValidationFailed(f"JSON payload of {len(value)} bytes exceeds the limit",
                               stage="decode")
    if b"\n" in value.strip() or not value.lstrip().startswith(b"{"):
        raise ValidationFailed("undecodable JSON record: expected one object on one line",
                               stage="decode")
    return _read_json(value, schema)


def _read_json(buf: bytes, schema: pa.Schema | None) -> pa.Table:
    parse = pajson.ParseOptions(
        explicit_schema=schema,
        unexpected_field_behavior="ignore" if schema is not None else "infer",
        newlines_in_values=False,
    )
    try:
        read = pajson.ReadOptions(block_size=max(1 << 20, len(buf) + 1))
        return pajson.read_json(pa.py_buffer(buf), parse_options=parse, read_options=read)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise ValidationFailed(f"undecodable JSON record: {_short(exc)}", stage="decode") from None


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


def decode_json_batch(values: Sequence[bytes], schema: pa.Schema | None = None) -> DecodedBatch:
    """Decode JSON messages (one object each) in one vectorised parse when possible."""
    n = len(values)
    if n == 0:
        return DecodedBatch(pa.table({}), np.zeros(0, np.int64), np.zeros(0, np.int32))
    ok = all(v and b"\n" not in v and len(v) <= MAX_RECORD_BYTES and v[:1] == b"{" for v in values)
    if ok:
        try:
            table = _read_json(b"\n".join(values), schema)
            if table.num_rows == n:
                return DecodedBatch(table, np.arange(n, dtype=np.int64), np.zeros(n, np.int32))
        except ValidationFailed:
            pass
    return _decode_one_by_one(values, lambda v: decode_json_one(v, schema), schema)


def _decode_one_by_one(
    values: Sequence[bytes], decode: Any, schema: pa.Schema | None
) -> DecodedBatch:
    tables: list[pa.Table] = []
    idx: list[np.ndarray] = []
    pos: list[np.ndarray] = []
    errors: list[tuple[int, ValidationFailed]] = []
    for i, v in enumerate(values):
        try:
            t = decode(v)
            if t.num_rows == 0:
                raise ValidationFailed("payload holds no rows", stage="decode")
        except ValidationFailed as exc:
            errors.append((i, exc))
            continue
        tables.append(t)
        idx.append(np.full(t.num_rows, i, np.int64))
        pos.append(np.arange(t.num_rows, dtype=np.int32))
    table, bad = _concat(tables, schema)
    if bad:
        # Schemas that cannot be unified: keep the first schema's messages, reject the rest.
        keep = [i for i in range(len(tables)) if i not in bad]
        for i in sorted(bad):
            errors.append((int(idx[i][0]), ValidationFailed(
                f"schema {tables[i].schema.names} does not match the batch", stage="decode")))
        tables = [tables[i] for i in keep]
        idx = [idx[i] for i in keep]
        pos = [pos[i] for i in keep]
        table, _ = _concat(tables, schema)
    errors.sort(key=lambda e: e[0])
    return DecodedBatch(
        table,
        np.concatenate(idx) if idx else np.zeros(0, np.int64),
        np.concatenate(pos) if pos else np.zeros(0, np.int32),
        errors,
    )


def _concat(tables: list[pa.Table], schema: pa.Schema | None) -> tuple[pa.Table, set[int]]:
    if not tables:
        return (schema.empty_table() if schema is not None else pa.table({})), set()
    try:
        return pa.concat_tables(tables, promote_options="permissive"), set()
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        first = tables[0].schema
        bad = {i for i, t in enumerate(tables) if not t.schema.equals(first)}
        return pa.table({}), bad


def decode_arrow_batch(values: Sequence[bytes], schema: pa.Schema | None = None) -> DecodedBatch:
    return _decode_one_by_one(values, decode_arrow, schema)


def decode_batch(
    values: Sequence[bytes], content_types: Sequence[str | None], schema: pa.Schema | None = None
) -> DecodedBatch:
    """Decode a mixed batch: JSON messages and Arrow messages, by their content-type header."""
    is_arrow = np.fromiter((ct == hdr.ARROW for ct in content_types), bool, len(content_types))
    if not is_arrow.any():
        return decode_json_batch(values, schema)
    if is_arrow.all():
        return decode_arrow_batch(values, schema)
    parts: list[DecodedBatch] = []
    for mask, fn in ((~is_arrow, decode_json_batch), (is_arrow, decode_arrow_batch)):
        where = np.flatnonzero(mask)
        sub = fn([values[i] for i in where], schema)
        sub.message_index = where[sub.message_index] if sub.num_rows else sub.message_index
        sub.errors = [(int(where[i]), e) for i, e in sub.errors]
        parts.append(sub)
    table, bad = _concat([p.table for p in parts if p.num_rows], schema)
    if bad:
        return _decode_one_by_one(values, lambda v: decode_arrow(v) if v[:1] != b"{" else
                                  decode_json_one(v, schema), schema)
    live = [p for p in parts if p.num_rows]
    return DecodedBatch(
        table,
        np.concatenate([p.message_index for p in live]) if live else np.zeros(0, np.int64),
        np.concatenate([p.row_in_message for p in live]) if live else np.zeros(0, np.int32),
        sorted([e for p in parts for e in p.errors], key=lambda e: e[0]),
    )
