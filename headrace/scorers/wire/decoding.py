"""Decode a consumed batch into one float32 feature matrix, and find the bad inputs.

A message's own bytes say what it is: an Arrow IPC stream starts with the 0xFFFFFFFF
continuation marker, which no JSON text can (0xFF is never UTF-8); everything else is read as
one JSON object. Reading the ``content-type`` header instead would cost ~2.5 µs a message
(``Message.headers()``), a quarter of the whole per-row budget at 100 000 rows/s.

JSON records are decoded one by one (``json_rows``), here or ahead of time by the decode
helpers (``decode_pool``), whose rows come in as ``ahead``. Arrow messages are read zero-copy,
one table each. With a Schema Registry (``registry``), a message starting with byte 0 is in its
wire format: decoded a schema id at a time into columns (``registry_records``). Rows with a
missing, null, NaN or infinite feature are rejected one by one; everything else is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from headrace.core.errors import ValidationFailed
from headrace.scorers.wire.arrow_limits import DEFAULT_MAX_ARROW_BYTES
from headrace.scorers.wire.budget import FLOAT32, FLOAT64, MessageCaps, admit
from headrace.scorers.wire.buffers import Scratch
from headrace.scorers.wire.json_rows import JsonRows, decode_rows
from headrace.scorers.wire.registry_records import (
    RegistryRecords,
    SchemaRecordFailed,
    WireRecords,
    not_configured,
    wrong_magic,
)
from headrace.streams import headers as hdr
from headrace.streams.codecs import arrow_flags, decode_arrow
from headrace.streams.consuming import RawBatch
from headrace.streams.schema_registry import wire_schema_id


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
    values = batch.values
    return np.fromiter(arrow_flags(values), bool, len(values))


@dataclass(frozen=True)
class DecodedAhead:
    """What the decode helpers made of a batch: its Arrow mask and its JSON messages' rows."""

    arrow: np.ndarray  # is_arrow_mask(batch)
    json: JsonRows  # rows of the messages where ``arrow`` is False, in order


def decode(batch: RawBatch, features: Sequence[str], ahead: DecodedAhead | None = None,
           scratch: Scratch | None = None, max_arrow_bytes: int = DEFAULT_MAX_ARROW_BYTES,
           caps: MessageCaps | None = None, registry: RegistryRecords | None = None
           ) -> Features:
    """All good rows of the batch in one matrix, written in place (no per-part concatenation),
    in ``scratch``'s memory when it is free."""
    width = len(features)
    caps = caps or MessageCaps()
    arrow = is_arrow_mask(batch) if ahead is None else ahead.arrow
    json = None if ahead is None else ahead.json
    bad: list[BadInput] = []
    tables: dict[int, pa.Table] = {}
    columns: list[tuple[int, pa.Table]] = []

    wire = None if registry is None else registry.wire_mask(batch.values) & ~arrow
    has_wire = wire is not None and bool(wire.any())
    json_idx = np.flatnonzero(~arrow & ~wire if has_wire and wire is not None else ~arrow)
    json_x = np.zeros((0, width), np.float32)
    json_ok = np.zeros(0, np.int64)
    if len(json_idx):
        if json is None or has_wire:  # helpers decode the JSON of batches without wire records
            json = decode_rows([batch.values[i] for i in json_idx.tolist()], features)
        json_x, ok, errs = json
        bad += [_json_error(batch, int(json_idx[i]), ValidationFailed(reason, stage=stage),
                            registry)
                for i, stage, reason in errs]
        json_ok = json_idx[ok]
    if has_wire and registry is not None and wire is not None:
        wire_x, wire_ok = wire_rows(registry.decode(batch.values, np.flatnonzero(wire),
                                                    features), features, bad)
        json_x = np.concatenate([json_x, wire_x])
        json_ok = np.concatenate([json_ok, wire_ok])

    for i in np.flatnonzero(arrow).tolist():
        try:
            admit(batch.values[i], caps=caps, max_arrow_bytes=max_arrow_bytes,
                  input_row_bytes=tabular_row_bytes(width))  # a bomb is refused before reading
            table = decode_arrow(batch.values[i])
            columns.append((i, _arrow_features(table, features)))
        except ValidationFailed as exc:
            bad.append(BadInput(i, None, exc, exc.stage or "decode"))
            continue
        tables[i] = table

    total = len(json_ok) + sum(t.num_rows for _, t in columns)
    x = (scratch or Scratch()).matrix(total, width)  # aligned: the model reads it in place
    msg = np.empty(total, np.int64)
    row = np.zeros(total, np.int32)
    lo = len(json_ok)
    msg[:lo] = json_ok
    with np.errstate(over="ignore"):  # out of float32 range -> inf, rejected as not finite
        x[:lo] = json_x
        for i, cols in columns:
            start = lo
            for rb in cols.to_batches():
                if rb.num_rows:
                    x[lo:lo + rb.num_rows] = np.asarray(rb.to_tensor(null_to_nan=True))
                    lo += rb.num_rows
            msg[start:lo] = i
            row[start:lo] = np.arange(lo - start, dtype=np.int32)

    if not _all_finite(x):  # whole-matrix check first: per-row only when needed
        finite = np.isfinite(x).all(axis=1)
        for i in np.flatnonzero(~finite).tolist():
            col = int(np.flatnonzero(~np.isfinite(x[i]))[0])
            m = int(msg[i])
            bad.append(BadInput(m, int(row[i]) if arrow[m] else None, ValidationFailed(
                f"feature {features[col]!r} is missing, null or not finite"), "validate"))
        x, msg, row = x[finite], msg[finite], row[finite]
    if has_wire:  # wire rows came after the JSON ones: back in message order
        order = np.argsort(msg, kind="stable")
        if (order[1:] < order[:-1]).any():
            x, msg, row = x[order], msg[order], row[order]
        bad = [with_schema_id(b, batch) for b in bad]
    return Features(x, msg, row, arrow, tables, bad)


def wire_rows(wired: WireRecords, features: Sequence[str], bad: list[BadInput]
              ) -> tuple[np.ndarray, np.ndarray]:
    """The wire records' feature rows (float32, NaN where null) and their messages; the bad
    ones added to ``bad``."""
    xs = [np.zeros((0, len(features)), np.float32)]
    msgs = [np.zeros(0, np.int64)]
    bad += [BadInput(i, None, exc, exc.stage or "decode") for i, exc in wired.bad]
    for g in wired.groups:
        if g.json is not None:
            gx, ok, errs = decode_rows(g.json, features)
            bad += [BadInput(int(g.messages[r]), None, SchemaRecordFailed(
                f"schema id {g.schema_id}: {why}", schema_id=g.schema_id, stage=stage), stage)
                for r, stage, why in errs]
            xs.append(gx)
            msgs.append(g.messages[ok])
            continue
        bad += [BadInput(int(g.messages[r]), None, exc, exc.stage or "decode")
                for r, exc in g.bad.items()]
        keep = np.ones(len(g.messages), bool)
        keep[list(g.bad)] = False
        if not keep.any():
            continue
        gx = np.empty((len(keep), len(features)), np.float32)
        try:
            with np.errstate(over="ignore"):  # out of float32 range: inf, refused as such
                for j, f in enumerate(features):
                    gx[:, j] = _numbers(g.columns[f], f)
        except ValidationFailed as exc:
            bad += [BadInput(int(m), None, SchemaRecordFailed(
                f"schema id {g.schema_id}: {exc}", schema_id=g.schema_id, stage="validate"),
                "validate") for m in g.messages[keep].tolist()]
            continue
        xs.append(gx if keep.all() else gx[keep])
        msgs.append(g.messages[keep])
    return np.concatenate(xs), np.concatenate(msgs)


def _numbers(col: pa.Array, name: str) -> np.ndarray:
    """A numeric column as float64 with NaN for null; ``ValidationFailed`` for another type."""
    t = col.type
    if pa.types.is_null(t):  # null in every row: each row is missing
        return np.full(len(col), np.nan)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t)):
        raise ValidationFailed(f"feature column {name!r} has non-numeric type {t}",
                               stage="validate")
    if not pa.types.is_floating(t):
        col = col.cast(pa.float64())
    return np.asarray(col.to_numpy(zero_copy_only=False), np.float64) if col.null_count else \
        col.to_numpy(zero_copy_only=False)


def with_schema_id(b: BadInput, batch: RawBatch) -> BadInput:
    """A wire record's bad input, its error carrying the record's schema id."""
    schema_id = wire_schema_id(batch.values[b.message])
    if isinstance(b.error, SchemaRecordFailed) or schema_id is None:
        return b
    return BadInput(b.message, b.row, SchemaRecordFailed(
        f"schema id {schema_id}: {b.error}", schema_id=schema_id, stage=b.stage), b.stage)


_JSONISH = (b"{", b"[", b" ", b"\t", b"\r", b"\n", b'"')
_FINITE_ROWS = 1 << 16
ROW_INDEX = 8 + 4  # Features.message (int64) and Features.row (int32)


def _all_finite(x: np.ndarray) -> bool:
    """``np.isfinite(x).all()`` a block of rows at a time: its bool temporary stays small (a
    whole-matrix one is a byte per value, which the decode budget does not hold)."""
    return all(np.isfinite(x[i:i + _FINITE_ROWS]).all() for i in range(0, len(x), _FINITE_ROWS))


def tabular_row_bytes(width: int) -> int:
    """A tabular model's decoded input per row: the float32 matrix, the float64 tensor
    ``to_tensor`` builds on the way (mixed column types widen to float64), and each row's
    message and row index."""
    return width * (FLOAT32 + FLOAT64) + ROW_INDEX


def _json_error(batch: RawBatch, i: int, error: Exception,
                registry: RegistryRecords | None = None) -> BadInput:
    """A dead letter's reason; a payload labelled Arrow that is not an Arrow stream says so,
    and so does one that looks like no input the scorer reads."""
    stage = getattr(error, "stage", None) or "decode"
    if hdr.get(batch.headers_of(i), hdr.CONTENT_TYPE) == hdr.ARROW:
        error = ValidationFailed("content-type says Arrow IPC but the payload is not an Arrow "
                                 "IPC stream (no 0xFFFFFFFF continuation marker)", stage="decode")
        return BadInput(i, None, error, "decode")
    value = batch.values[i]
    other = not_configured(value) if registry is None else (
        wrong_magic(value) if value and value[:1] not in _JSONISH else None)
    if other is not None and stage == "decode":
        return BadInput(i, None, ValidationFailed(other, stage="decode"), "decode")
    return BadInput(i, None, error, stage)


def _arrow_features(table: pa.Table, features: Sequence[str]) -> pa.Table:
    """The feature columns, in model order, each of a type ``RecordBatch.to_tensor`` takes."""
    if table.num_rows == 0:
        raise ValidationFailed("Arrow payload holds no rows", stage="decode")
    names = table.column_names
    present = set(names)
    missing = [f for f in features if f not in present]
    if missing:
        raise ValidationFailed(f"Arrow batch lacks feature column(s) {missing[:5]}",
                               stage="validate")
    if len(present) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValidationFailed(f"Arrow batch repeats column(s) {dup[:5]}", stage="validate")
    cols = []
    for name in features:
        col = table.column(name)
        t = col.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)
                or pa.types.is_boolean(t) or pa.types.is_decimal(t)):
            raise ValidationFailed(f"feature column {name!r} has non-numeric type {t}",
                                   stage="validate")
        if not (pa.types.is_integer(t) or t in (pa.float32(), pa.float64())):
            col = col.cast(pa.float64())  # booleans, decimals, half floats
        cols.append(col)
    return pa.Table.from_arrays(cols, names=[f"c{j}" for j in range(len(cols))])
