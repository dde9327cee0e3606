"""What an Arrow column holds, as the kinds' codecs ask it at ``datasets put`` and training."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.core.errors import PermanentError


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


def string_values(col: pa.ChunkedArray) -> np.ndarray:
    """A column's values as Python strings (object array), nulls as empty strings."""
    strings = pc.fill_null(pc.cast(col, pa.string()), "")
    return np.asarray(strings.to_numpy(zero_copy_only=False), dtype=object)


def mean_words(col: pa.ChunkedArray, sample: int = 1000) -> float:
    """Whitespace-separated words a row, over the column's first ``sample`` rows."""
    head = col.slice(0, sample).combine_chunks()
    words = pc.list_value_length(pc.utf8_split_whitespace(pc.fill_null(head, "")))
    return float(pc.mean(words).as_py() or 0.0)
