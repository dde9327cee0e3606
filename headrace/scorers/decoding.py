"""Decode a consumed batch into one float32 feature matrix, and find the bad inputs.

JSON messages (one object each) are joined and parsed in one ``pyarrow.json`` call with an
explicit float64 schema of the model's features, split in ~1 MiB blocks so both cores parse.
When that parse fails, the batch is bisected so that a poison message costs O(log n) parses
instead of a per-message fallback (this replaces ``codecs.decode_json_batch`` on the hot path).
Arrow messages are read zero-copy, one table each. Rows with a missing, null, NaN or infinite
feature are rejected one by one; everything else is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from headrace.core.errors import ValidationFailed
from headrace.streams import headers as hdr
from headrace.streams.codecs import MAX_RECORD_BYTES, decode_arrow, decode_json_one
from headrace.streams.scoring_io import RawBatch

BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class BadInput:
    """A message (``row`` None) or one row of an Arrow message that cannot be scored."""

    message: int
    row: int | None
    error: Exception
    stage: str


@dataclass
class Features:
    """Rows to score: ``x[i]`` came from message ``message[i]``, row ``row[i]`` inside it."""

    x: np.ndarray  # float32 (rows, features)
    message: np.ndarray  # int64
    row: np.ndarray  # int32
    is_arrow: np.ndarray  # bool, one per message of the batch
    arrow_tables: dict[int, pa.Table] = field(default_factory=dict)
    bad: list[BadInput] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return int(self.x.shape[0])


def is_arrow_mask(batch: RawBatch) -> np.ndarray:
    cts = batch.content_types
    return np.fromiter((ct == hdr.ARROW for ct in cts), bool, len(cts))


def decode(batch: RawBatch, features: Sequence[str]) -> Features:
    width = len(features)
    arrow = is_arrow_mask(batch)
    parts_x: list[np.ndarray] = []
    parts_m: list[np.ndarray] = []
    parts_r: list[np.ndarray] = []
    bad: list[BadInput] = []
    tables: dict[int, pa.Table] = {}

    json_idx = np.flatnonzero(~arrow)
    if len(json_idx):
        x, ok, errs = _decode_json([batch.values[i] for i in json_idx], features)
        bad += [BadInput(int(json_idx[i]), None, e, "decode") for i, e in errs]
        parts_x.append(x)
        parts_m.append(json_idx[ok])
        parts_r.append(np.zeros(len(ok), np.int32))

    for i in np.flatnonzero(arrow).tolist():
        try:
            table = decode_arrow(batch.values[i])
            x = _arrow_matrix(table, features)
        except ValidationFailed as exc:
            bad.append(BadInput(i, None, exc, exc.stage or "decode"))
            continue
        tables[i] = table
        parts_x.append(x)
        parts_m.append(np.full(len(x), i, np.int64))
        parts_r.append(np.arange(len(x), dtype=np.int32))

    if parts_x:
        x = np.concatenate(parts_x) if len(parts_x) > 1 else parts_x[0]
        msg = np.concatenate(parts_m).astype(np.int64, copy=False)
        row = np.concatenate(parts_r).astype(np.int32, copy=False)
    else:
        x = np.zeros((0, width), np.float32)
        msg = np.zeros(0, np.int64)
        row = np.zeros(0, np.int32)

    finite = np.isfinite(x).all(axis=1) if len(x) else np.ones(0, bool)
    if not finite.all():
        for i in np.flatnonzero(~finite).tolist():
            col = int(np.flatnonzero(~np.isfinite(x[i]))[0])
            m = int(msg[i])
            bad.append(BadInput(m, int(row[i]) if arrow[m] else None, ValidationFailed(
                f"feature {features[col]!r} is missing, null or not finite"), "validate"))
        x, msg, row = x[finite], msg[finite], row[finite]
    return Features(x, msg, row, arrow, tables, bad)


def _schema(features: Sequence[str]) -> pa.Schema:
    return pa.schema([(f, pa.float64()) for f in features])


def _parse(buf: bytes, schema: pa.Schema) -> pa.Table:
    return pajson.read_json(
        pa.py_buffer(buf),
        parse_options=pajson.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="ignore"),
        read_options=pajson.ReadOptions(block_size=BLOCK_BYTES, use_threads=True),
    )


def _looks_like_object(value: bytes) -> bool:
    return value[:1] == b"{" or value.lstrip()[:1] == b"{"


def _decode_json(
    values: list[bytes], features: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, Exception]]]:
    """Matrix of the good messages, their positions in ``values``, and the bad ones' errors.

    A value that is not an object never reaches pyarrow: pyarrow 22 crashes the process on a
    lone JSON ``null`` parsed with an explicit schema.
    """
    if all(_looks_like_object(v) for v in values):
        return _decode_objects(values, features)
    keep = np.fromiter((i for i, v in enumerate(values) if _looks_like_object(v)), np.int64)
    rejected: list[tuple[int, Exception]] = [
        (i, ValidationFailed("undecodable JSON record: expected one object on one line",
                             stage="decode"))
        for i, v in enumerate(values) if not _looks_like_object(v)]
    x, ok, errors = _decode_objects([values[i] for i in keep], features)
    errors = [(int(keep[i]), e) for i, e in errors] + rejected
    errors.sort(key=lambda e: e[0])
    return x, keep[ok], errors


def _decode_objects(
    values: list[bytes], features: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, Exception]]]:
    if not values:
        return np.zeros((0, len(features)), np.float32), np.zeros(0, np.int64), []
    schema = _schema(features)
    errors: list[tuple[int, Exception]] = []
    good: list[tuple[int, int, pa.Table]] = []

    def attempt(lo: int, hi: int) -> None:
        chunk = values[lo:hi]
        joined = b"\n".join(chunk)
        if joined.count(b"\n") == hi - lo - 1 and len(joined) < 1 << 30:
            try:
                table = _parse(joined, schema)
                if table.num_rows == hi - lo:
                    good.append((lo, hi, table))
                    return
            except (pa.ArrowInvalid, pa.ArrowException):
                pass
        if hi - lo == 1:
            errors.append((lo, _why(values[lo], schema)))
            return
        mid = (lo + hi) // 2
        attempt(lo, mid)
        attempt(mid, hi)

    attempt(0, len(values))
    good.sort(key=lambda g: g[0])
    width = len(features)
    if not good:
        return np.zeros((0, width), np.float32), np.zeros(0, np.int64), errors
    ok = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi, _ in good])
    x = np.empty((len(ok), width), np.float32)
    at = 0
    for _, _, table in good:
        n = table.num_rows
        for j, name in enumerate(features):
            x[at:at + n, j] = table.column(name).to_numpy()
        at += n
    errors.sort(key=lambda e: e[0])
    return x, ok, errors


def _why(value: bytes, schema: pa.Schema) -> Exception:
    if len(value) > MAX_RECORD_BYTES:
        return ValidationFailed(f"JSON payload of {len(value)} bytes exceeds the limit")
    try:
        t = decode_json_one(value, schema)
    except ValidationFailed as exc:
        return exc
    if t.num_rows != 1:
        return ValidationFailed(f"JSON payload holds {t.num_rows} rows, expected one object")
    return ValidationFailed("undecodable JSON record")


def _arrow_matrix(table: pa.Table, features: Sequence[str]) -> np.ndarray:
    if table.num_rows == 0:
        raise ValidationFailed("Arrow payload holds no rows", stage="decode")
    names = set(table.column_names)
    missing = [f for f in features if f not in names]
    if missing:
        raise ValidationFailed(f"Arrow batch lacks feature column(s) {missing[:5]}",
                               stage="validate")
    x = np.empty((table.num_rows, len(features)), np.float32)
    for j, name in enumerate(features):
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
                or pa.types.is_boolean(col.type) or pa.types.is_decimal(col.type)):
            raise ValidationFailed(f"feature column {name!r} has non-numeric type {col.type}",
                                   stage="validate")
        if col.null_count or not pa.types.is_floating(col.type):
            col = col.cast(pa.float64())
        x[:, j] = col.to_numpy()  # nulls become NaN and are rejected per row
    return x
