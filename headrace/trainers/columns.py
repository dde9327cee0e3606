"""Column kinds of a dataset table: inferred from the Arrow schema, kept in its metadata, forcible.

``datasets put`` records the kinds in the Parquet schema metadata (``headrace.kinds``); a table
without them (any Parquet file) has them inferred the same way at training time. What a kind
accepts and how it is inferred is its codec's (``headrace.codecs``); the label is a column's
role, not an input kind, so it is the one kind decided here.
"""

from __future__ import annotations

import json

import pyarrow as pa

from headrace import codecs
from headrace.codecs.arrow_types import (
    ColumnError,
    is_binary,
    is_numeric,
    is_string,
    tensor_shape,
    tensor_values,
)
from headrace.store.signature import InputKind, Kind

KINDS_KEY = b"headrace.kinds"

# One enum of kinds for dataset columns and model inputs (LABEL is a column's kind only).
ColumnKind = InputKind

__all__ = ["KINDS_KEY", "ColumnError", "ColumnKind", "check_kind", "infer_kind", "is_binary",
           "is_numeric", "is_string", "kinds_of", "stored_kinds", "tensor_shape",
           "tensor_values", "with_kinds"]


def infer_kind(col: pa.ChunkedArray) -> Kind | None:
    """The first kind whose codec claims the column (None: not usable)."""
    for c in codecs.inferring():
        if c.infer is not None and c.infer(col):
            return codecs.kind(c.kind)
    return None


def stored_kinds(table: pa.Table) -> dict[str, Kind]:
    meta = table.schema.metadata or {}
    if KINDS_KEY not in meta:
        return {}
    try:
        raw = json.loads(meta[KINDS_KEY])
        return {str(k): codecs.kind(str(v)) for k, v in raw.items() if k in table.column_names}
    except (ValueError, AttributeError, codecs.UnknownKind):
        return {}


def kinds_of(table: pa.Table, *, label: str | None = None,
             forced: dict[str, Kind] | None = None) -> dict[str, Kind | None]:
    """Every column's kind: forced, else stored, else inferred (None: not usable)."""
    stored = stored_kinds(table)
    out: dict[str, Kind | None] = {}
    for name in table.column_names:
        if forced and name in forced:
            out[name] = forced[name]
        elif name == label:
            out[name] = ColumnKind.LABEL
        elif name in stored and stored[name] != ColumnKind.LABEL:
            out[name] = stored[name]
        else:
            out[name] = infer_kind(table.column(name))
    return out


def check_kind(table: pa.Table, name: str, kind: Kind) -> None:
    """A one-line error when column ``name`` cannot hold ``kind``."""
    t = table.schema.field(name).type
    if kind == ColumnKind.LABEL:
        ok = is_string(t) or is_numeric(t)
    else:
        ok = codecs.codec(kind).accepts(table.column(name))
    if not ok:
        raise ColumnError(f"column {name!r} ({t}) cannot be a {kind.value} column")


def with_kinds(table: pa.Table, kinds: dict[str, Kind | None]) -> pa.Table:
    meta = dict(table.schema.metadata or {})
    meta[KINDS_KEY] = json.dumps({k: str(v) for k, v in kinds.items() if v is not None}).encode()
    return table.replace_schema_metadata(meta)
