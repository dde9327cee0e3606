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

# A body that does not decode, by its position in the group.
RowErrors = dict[int, str]

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}
# Logical types read as their underlying number (fastavro would build datetime objects).
_AS_NUMBER = {"date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
              "timestamp-nanos", "local-timestamp-millis", "local-timestamp-micros",
              "local-timestamp-nanos", "uuid"}
_PAD = 16  # zero bytes after the last body: a read past a record's end stays in the buffer


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


class _Reader:
    """Every body's read position, advanced a field at a time."""

    def __init__(self, values: Sequence[bytes], skip: int) -> None:
        n = len(values)
        lengths = np.fromiter(map(len, values), np.int64, n)
        self.end = np.cumsum(lengths)
        self.pos = self.end - lengths + skip
        self.buf = np.frombuffer(b"".join(values) + bytes(_PAD), np.uint8)
        self.last = len(self.buf) - _PAD  # clamp reads here: a bad body never reads outside
        self.bad = np.zeros(n, bool)

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """Zigzag varints (Avro int and long) at ``rows``' positions, as int64."""
        p = np.minimum(self.pos[rows], self.last)
        acc = np.zeros(len(rows), np.uint64)
        size = np.zeros(len(rows), np.int64)
        active = np.arange(len(rows))
        for k in range(10):
            b = self.buf[p[active] + k]
            acc[active] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            more = (b & 0x80) != 0
            size[active[~more]] = k + 1
            active = active[more]
            if not len(active):
                break
        if len(active):
            self.bad[rows[active]] = True
            size[active] = 10
        self.pos[rows] = p + size
        return ((acc >> np.uint64(1)) ^ (np.uint64(0) - (acc & np.uint64(1)))).view(np.int64)

    def fixed(self, rows: np.ndarray, width: int) -> np.ndarray:
        p = np.minimum(self.pos[rows], self.last)
        self.pos[rows] = p + width
        return self.buf[p[:, None] + np.arange(width)]

    def floats(self, rows: np.ndarray, run: Sequence[_Field]) -> list[np.ndarray]:
        """A run of float / double fields, each as a contiguous array: read in place as
        strided views when the rows sit equally spaced (records of one length), else one
        gather for the whole run."""
        widths = [8 if f.kind == "double" else 4 for f in run]
        total = sum(widths)
        p = np.minimum(self.pos[rows], self.last)
        self.pos[rows] = p + total
        m = len(rows)
        offsets = np.cumsum([0, *widths[:-1]]).tolist()
        stride = int(p[1] - p[0]) if m > 1 else total
        if m and stride >= total and int(p[0]) + (m - 1) * stride + total <= len(self.buf) and (
                m == 1 or bool((np.diff(p) == stride).all())):
            return [np.ascontiguousarray(np.ndarray((m,), f"<f{w}", self.buf, int(p[0]) + o,
                                                    (stride,)))
                    for w, o in zip(widths, offsets, strict=True)]
        block = self.buf[p[:, None] + np.arange(total)]
        return [np.ascontiguousarray(block[:, o:o + w]).view(f"<f{w}").reshape(-1)
                for w, o in zip(widths, offsets, strict=True)]

    def blobs(self, rows: np.ndarray, keep: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """Length-prefixed bytes at ``rows``: (lengths, the bytes back to back) or None."""
        size = self.varint(rows)
        p = self.pos[rows]
        wrong = (size < 0) | (size > self.end[rows] - p)
        if wrong.any():
            self.bad[rows[wrong]] = True
            size = np.where(wrong, 0, size)
        self.pos[rows] = p + size
        if not keep:
            return None
        starts = np.cumsum(size) - size
        idx = np.repeat(p - starts, size) + np.arange(int(size.sum()), dtype=np.int64)
        return size, self.buf[idx]


def _vectorised(plan: _Record, values: Sequence[bytes], want: list[str], skip: int
                ) -> tuple[dict[str, pa.Array], RowErrors]:
    n = len(values)
    r = _Reader(values, skip)
    cols: dict[str, pa.Array] = {}
    _read_record(r, plan, np.arange(n, dtype=np.int64), n, set(want), cols)
    r.bad |= r.pos != r.end  # a body longer or shorter than its schema says
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


def _read_record(r: _Reader, rec: _Record, rows: np.ndarray, n: int, want: set[str],
                 cols: dict[str, pa.Array]) -> None:
    run: list[_Field] = []
    for f in (*rec.fields, None):
        if f is not None and f.kind in ("float", "double") and f.nullable is None:
            run.append(f)  # read with its neighbours, once
            continue
        if run:
            for g, arr in zip(run, r.floats(rows, run), strict=True):
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


def _read_value(r: _Reader, f: _Field, rows: np.ndarray, keep: bool) -> pa.Array | None:
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
