"""Avro bodies of one writer schema to Arrow columns, a field at a time over the whole batch.

The hot path reads records of primitive fields (boolean, int, long, float, double, string,
bytes), enums, nested records and optional unions (``["null", T]``) without a Python object
per record: every record's read position is one element of a numpy vector, and each field of
the schema advances all of them at once (a varint is at most ten vectorised steps, a string
one gather). Measured against fastavro's per-record ``schemaless_reader`` in
``bench/bench_avro_decode.py``. Anything else (arrays, maps, fixed, decimals, other unions)
goes through fastavro record by record; both give the same columns.

Columns are named by path: a nested record's field is ``parent.child``. Logical types keep
their Avro number: ``date`` days since the epoch, ``timestamp-millis`` / ``-micros``
milliseconds / microseconds since the epoch, ``time-*`` since midnight; a ``decimal`` becomes a
float; enums are strings.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from headrace.scorers.wire.byte_positions import Positions

# A body that does not decode, by its position in the group.
RowErrors = dict[int, str]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}
# Logical types read as their underlying number (fastavro would build datetime objects).
_AS_NUMBER = {"date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
              "timestamp-nanos", "local-timestamp-millis", "local-timestamp-micros",
              "local-timestamp-nanos", "uuid"}


class SchemaUnusable(ValueError):
    """The schema cannot be read (not Avro, or not a record)."""


@dataclass(frozen=True)
class AvroColumns:
    """One writer schema compiled: ``fields`` are the column paths it can give."""

    fields: tuple[str, ...]
    _schema: dict[str, Any]
    _plan: _Record | None  # None: the per-record fallback
    _parsed: Any  # fastavro's parsed schema

    @property
    def vectorised(self) -> bool:
        return self._plan is not None

    def columns(self, values: Sequence[bytes], wanted: Iterable[str], skip: int = 0
                ) -> tuple[dict[str, pa.Array], RowErrors]:
        """The ``wanted`` fields the schema has, one row per value (its body from byte
        ``skip`` on; a bad body's row is null), and the bodies that do not decode with why."""
        want = [f for f in dict.fromkeys(wanted) if f in set(self.fields)]
        if self._plan is not None:
            return _vectorised(self._plan, values, want, skip)
        return _per_record(self._parsed, [v[skip:] for v in values] if skip else values, want)


def compile_schema(schema_str: str) -> AvroColumns:
    import fastavro

    try:
        schema = json.loads(schema_str)
    except ValueError as exc:
        raise SchemaUnusable(f"not an Avro schema: {exc}") from None
    schema = _strip_number_logicals(schema)
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise SchemaUnusable(f"not an Avro schema: {exc}") from None
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        raise SchemaUnusable("the Avro schema is not a record")
    named: dict[str, Any] = {}
    fields = tuple(_paths(schema, "", named, set()))
    try:
        plan: _Record | None = _plan_record(schema, "", {})
    except _NotFlat:
        plan = None
    return AvroColumns(fields, schema, plan, parsed)


def _strip_number_logicals(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip_number_logicals(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strip_number_logicals(v) for k, v in node.items()}
    if out.get("logicalType") in _AS_NUMBER:
        del out["logicalType"]
    return out


def _name(node: dict[str, Any]) -> str:
    name = str(node.get("name", ""))
    ns = node.get("namespace")
    return f"{ns}.{name}" if ns and "." not in name else name


def _paths(node: Any, prefix: str, named: dict[str, Any], seen: set[str]) -> Iterable[str]:
    """Column paths of a record: its fields, and nested records' fields as ``a.b`` (a
    record itself is no column)."""
    for f in node["fields"]:
        path = f"{prefix}{f['name']}"
        t = _resolve(f["type"], named)
        branches = [_resolve(b, named) for b in (t if isinstance(t, list) else [t])]
        if not any(isinstance(b, dict) and b.get("type") == "record" for b in branches):
            yield path
        for b in branches:
            if isinstance(b, dict) and b.get("type") == "record":
                key = _name(b)
                named.setdefault(key, b)
                if key not in seen:  # a recursive record is not unrolled
                    yield from _paths(b, path + ".", named, seen | {key})
            elif isinstance(b, dict) and b.get("type") in ("enum", "fixed"):
                named.setdefault(_name(b), b)


def _resolve(t: Any, named: dict[str, Any]) -> Any:
    if isinstance(t, str) and t not in _PRIMITIVES:
        return named.get(t, t)
    if isinstance(t, dict) and t.get("type") in _PRIMITIVES and "logicalType" not in t:
        return t["type"]
    return t


# -- the vectorised plan -----------------------------------------------------------------------
class _NotFlat(Exception):
    pass


@dataclass(frozen=True)
class _Field:
    path: str
    kind: str  # a primitive, "enum" or "record"
    nullable: int | None = None  # the null branch of a ["null", T] union
    symbols: tuple[str, ...] = ()
    record: _Record | None = None


@dataclass(frozen=True)
class _Record:
    fields: tuple[_Field, ...]


def _plan_record(node: dict[str, Any], prefix: str, named: dict[str, Any]) -> _Record:
    named[_name(node)] = node
    return _Record(tuple(_plan_field(f"{prefix}{f['name']}", f["type"], named)
                         for f in node["fields"]))


def _plan_field(path: str, t: Any, named: dict[str, Any]) -> _Field:
    nullable = None
    if isinstance(t, list):
        if len(t) != 2 or "null" not in t:
            raise _NotFlat
        nullable = t.index("null")
        t = t[1 - nullable]
    t = _resolve(t, named)
    if isinstance(t, str):
        if t in _PRIMITIVES - {"null"}:
            return _Field(path, t, nullable)
        raise _NotFlat
    if isinstance(t, dict) and "logicalType" not in t:
        if t.get("type") == "enum":
            named[_name(t)] = t
            return _Field(path, "enum", nullable, tuple(t["symbols"]))
        if t.get("type") == "record":
            if _name(t) in named:
                raise _NotFlat  # recursive
            return _Field(path, "record", nullable,
                          record=_plan_record(t, path + ".", named))
    raise _NotFlat


def _vectorised(plan: _Record, values: Sequence[bytes], want: list[str], skip: int
                ) -> tuple[dict[str, pa.Array], RowErrors]:
    n = len(values)
    r = Positions(values, skip)
    cols: dict[str, pa.Array] = {}
    _read_record(r, plan, np.arange(n, dtype=np.int64), n, set(want), cols)
    r.finish()  # a body longer or shorter than its schema says
    errors: RowErrors = {}
    if r.bad.any():
        errors = {int(i): f"body does not decode as its Avro schema says (record {i})"
                  for i in np.flatnonzero(r.bad).tolist()}
        valid = pa.array(~r.bad)
        cols = {k: _null_where_bad(v, valid) for k, v in cols.items()}
    return cols, errors


def _null_where_bad(arr: pa.Array, valid: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.if_else(valid, arr, pa.scalar(None, arr.type))


def _read_record(r: Positions, rec: _Record, rows: np.ndarray, n: int, want: set[str],
                 cols: dict[str, pa.Array]) -> None:
    run: list[_Field] = []
    for f in (*rec.fields, None):
        if f is not None and f.kind in ("float", "double") and f.nullable is None:
            run.append(f)  # read with its neighbours, once
            continue
        if run:
            widths = [8 if g.kind == "double" else 4 for g in run]
            for g, arr in zip(run, r.floats(rows, widths), strict=True):
                if g.path in want:
                    cols[g.path] = _scatter(pa.array(arr), rows, n)
            run = []
        if f is None:
            break
        present = rows
        if f.nullable is not None:
            branch = r.varint(rows)
            wrong = (branch != 0) & (branch != 1)
            r.bad[rows[wrong]] = True
            present = rows[(branch != f.nullable) & ~wrong]
        if f.kind == "record":
            assert f.record is not None
            _read_record(r, f.record, present, n, want, cols)
            continue
        keep = f.path in want
        value = _read_value(r, f, present, keep)
        if value is not None:
            cols[f.path] = _scatter(value, present, n)


def _read_value(r: Positions, f: _Field, rows: np.ndarray, keep: bool) -> pa.Array | None:
    k = f.kind
    if k in ("int", "long"):
        ints = r.varint(rows)
        return pa.array(ints) if keep else None
    if k in ("double", "float"):
        width = 8 if k == "double" else 4
        raw = r.fixed(rows, width)
        return pa.array(raw.view(f"<f{width}").reshape(-1)) if keep else None
    if k == "boolean":
        b = r.fixed(rows, 1).reshape(-1)
        r.bad[rows[b > 1]] = True
        return pa.array(b == 1) if keep else None
    if k == "enum":
        idx = r.varint(rows)
        wrong = (idx < 0) | (idx >= len(f.symbols))
        r.bad[rows[wrong]] = True
        return pa.array(f.symbols, pa.string()).take(pa.array(np.where(wrong, 0, idx))) \
            if keep else None
    got = r.blobs(rows, keep)
    if got is None:
        return None
    size, data = got
    offsets = np.zeros(len(size) + 1, np.int64)
    np.cumsum(size, out=offsets[1:])
    arr = pa.Array.from_buffers(pa.large_binary(), len(size),
                                [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if k == "string":
        arr = arr.cast(pa.large_string(), safe=False)
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:  # some string is not UTF-8: find which, one at a time
            for j, v in enumerate(arr.cast(pa.large_binary()).to_pylist()):
                try:
                    (v or b"").decode()
                except UnicodeDecodeError:
                    r.bad[rows[j]] = True
            arr = pa.array([None] * len(size), pa.large_string())
        arr = arr.cast(pa.string())
    return arr


def _scatter(arr: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """``arr``'s values at ``rows`` of an ``n``-row column, null elsewhere."""
    if len(rows) == n:
        return arr
    at = np.full(n, -1, np.int64)
    at[rows] = np.arange(len(rows))
    return arr.take(pa.array(at, mask=at < 0))


# -- the per-record fallback -------------------------------------------------------------------
def _per_record(parsed: Any, bodies: Sequence[bytes], want: list[str]
                ) -> tuple[dict[str, pa.Array], RowErrors]:
    import fastavro

    read: Callable[..., Any] = fastavro.schemaless_reader
    errors: RowErrors = {}
    values: dict[str, list[Any]] = {f: [] for f in want}
    paths = [(f, f.split(".")) for f in want]
    for i, body in enumerate(bodies):
        stream = io.BytesIO(body)
        try:
            rec = read(stream, parsed, None)
            if stream.tell() != len(body):
                raise ValueError(f"{len(body) - stream.tell()} bytes left over")
        except Exception as exc:  # fastavro raises many types for a bad body
            errors[i] = f"body does not decode as its Avro schema says: {exc!r}"[:500]
            rec = {}
        for f, parts in paths:
            values[f].append(_plain(_walk(rec, parts)))
    cols: dict[str, pa.Array] = {}
    for f in want:
        try:
            cols[f] = pa.array(values[f])
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: kept as text
            cols[f] = pa.array([None if v is None else str(v) for v in values[f]])
    return cols, errors


def _walk(rec: Any, parts: list[str]) -> Any:
    for p in parts:
        if not isinstance(rec, dict):
            return None
        rec = rec.get(p)
    return rec


def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return None  # a record or map is read by its fields' paths
    return v
