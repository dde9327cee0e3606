"""Column kinds of a dataset table: inferred from the Arrow schema, kept in its metadata, forcible.

``datasets put`` records the kinds in the Parquet schema metadata (``headrace.kinds``); a table
without them (any Parquet file) has them inferred the same way at training time.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.core.errors import PermanentError
from headrace.store.signature import InputKind

KINDS_KEY = b"headrace.kinds"
TEXT_MIN_WORDS = 3.0  # a string column averaging this many words a row is text, else category


# One enum of kinds for dataset columns and model inputs (LABEL is a column's kind only).
ColumnKind = InputKind


class ColumnError(PermanentError):
    """A column cannot be used as the kind asked for."""


def is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))


def is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_binary_view(t))


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t))


def tensor_shape(col: pa.ChunkedArray | pa.Array) -> tuple[int, ...] | None:
    """The per-row shape of a fixed-shape tensor, (nested) fixed-size list, or (nested) list
    whose rows all have the same length; None if the column is not one."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr.type, pa.FixedShapeTensorType):
        return tuple(int(s) for s in arr.type.shape)
    shape: list[int] = []
    while _is_list(arr.type):
        if len(arr) == 0:
            return None
        lengths = pc.list_value_length(arr)
        lo, hi = pc.min_max(lengths).values()
        if lo.as_py() is None or lo.as_py() != hi.as_py() or lo.as_py() == 0:
            return None
        shape.append(int(lo.as_py()))
        arr = arr.flatten()
    if not shape or not is_numeric(arr.type):
        return None
    return tuple(shape)


def tensor_values(col: pa.ChunkedArray | pa.Array, shape: tuple[int, ...]) -> np.ndarray:
    """``float32 (rows, *shape)`` from a tensor column (checked by :func:`tensor_shape`)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(arr)
    if isinstance(arr.type, pa.FixedShapeTensorType):
        arr = arr.storage
    while _is_list(arr.type):
        arr = arr.flatten()
    if arr.null_count:
        raise ColumnError("tensor values contain nulls")
    values = arr.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    if values.size != n * int(np.prod(shape)):
        raise ColumnError(f"tensor rows are not all of shape {shape}")
    return values.reshape((n, *shape))


def infer_kind(col: pa.ChunkedArray) -> ColumnKind | None:
    t = col.type
    if is_numeric(t):
        return ColumnKind.NUMERIC
    if is_binary(t):
        return ColumnKind.IMAGE
    if is_string(t):
        sample = col.slice(0, 1000).combine_chunks()
        words = pc.list_value_length(pc.utf8_split_whitespace(pc.fill_null(sample, "")))
        mean = pc.mean(words).as_py() or 0.0
        return ColumnKind.TEXT if mean >= TEXT_MIN_WORDS else ColumnKind.CATEGORY
    if tensor_shape(col) is not None:
        return ColumnKind.TENSOR
    return None


def stored_kinds(table: pa.Table) -> dict[str, ColumnKind]:
    meta = table.schema.metadata or {}
    if KINDS_KEY not in meta:
        return {}
    try:
        raw = json.loads(meta[KINDS_KEY])
        return {str(k): ColumnKind(v) for k, v in raw.items() if k in table.column_names}
    except (ValueError, AttributeError):
        return {}


def kinds_of(table: pa.Table, *, label: str | None = None,
             forced: dict[str, ColumnKind] | None = None) -> dict[str, ColumnKind | None]:
    """Every column's kind: forced, else stored, else inferred (None: not usable)."""
    stored = stored_kinds(table)
    out: dict[str, ColumnKind | None] = {}
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


def check_kind(table: pa.Table, name: str, kind: ColumnKind) -> None:
    """A one-line error when column ``name`` cannot hold ``kind``."""
    t = table.schema.field(name).type
    ok = {ColumnKind.NUMERIC: is_numeric(t), ColumnKind.IMAGE: is_binary(t),
          ColumnKind.TEXT: is_string(t), ColumnKind.CATEGORY: is_string(t) or is_numeric(t),
          ColumnKind.TENSOR: tensor_shape(table.column(name)) is not None,
          ColumnKind.LABEL: is_string(t) or is_numeric(t)}[kind]
    if not ok:
        raise ColumnError(f"column {name!r} ({t}) cannot be a {kind.value} column")


def with_kinds(table: pa.Table, kinds: dict[str, ColumnKind | None]) -> pa.Table:
    meta = dict(table.schema.metadata or {})
    meta[KINDS_KEY] = json.dumps({k: v.value for k, v in kinds.items() if v is not None}).encode()
    return table.replace_schema_metadata(meta)
