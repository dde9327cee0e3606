"""One model input's column for a group of rows, from Arrow arrays, vectorised per kind.

Every builder returns the batch-shaped array for all ``n`` rows (bad rows are zeros or empty
strings) and the reasons of the bad rows, each naming the input. Nothing loops per pixel,
element or token in Python; images are decoded one call per image (``images``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.store import tokens
from headrace.store.signature import ModelInput

Reasons = dict[int, str]
Getter = Callable[[str], "pa.Array | None"]
Builder = Callable[["ModelInput", Getter, int, "Limits", "Counter[str] | None"],
                   tuple[np.ndarray, Reasons]]

DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
          "uint8": np.uint8}


@dataclass(frozen=True)
class Limits:
    max_image_pixels: int = field(default_factory=lambda: _images().DEFAULT_MAX_PIXELS)


def _images() -> Any:
    """``store.images``, imported when an image is decoded: it needs Pillow (the scorer and
    trainer extras), which a base install running ``send`` or ``tail`` lacks."""
    from headrace.store import images

    return images


def tensor_dtype(inp: ModelInput) -> type:
    return DTYPES.get(inp.dtype, np.float32)


def _note(reasons: Reasons, rows: Any, why: str) -> None:
    for r in np.asarray(rows, np.int64).tolist():
        reasons.setdefault(int(r), why)


def present(fn: Callable[[ModelInput, pa.Array, Limits, Counter[str] | None],
                          tuple[np.ndarray, Reasons]],
            empty: Callable[[ModelInput, int], np.ndarray]) -> Builder:
    """A builder of a one-field kind: the field missing from the batch is a reason per row."""

    def build(inp: ModelInput, get: Getter, n: int, limits: Limits,
              conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
        arr = get(inp.name)
        if arr is None:
            return empty(inp, n), dict.fromkeys(range(n), f"input {inp.name!r} is missing")
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        return fn(inp, arr, limits, conversions)

    return build


def numeric(inp: ModelInput, get: Getter, n: int, limits: Limits,
            conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    out = np.zeros((n, len(inp.columns)), np.float32)
    reasons: Reasons = {}
    for j, col in enumerate(inp.columns):
        arr = get(col)
        if arr is None:
            _note(reasons, range(n), f"input {inp.name!r}: field {col!r} is missing")
            continue
        t = arr.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                or pa.types.is_null(t) or pa.types.is_decimal(t)):
            _note(reasons, range(n), f"input {inp.name!r}: field {col!r} is not a number ({t})")
            continue
        with np.errstate(over="ignore"):
            v = np.asarray(pc.cast(arr, pa.float64()).fill_null(np.nan), np.float64
                           ).astype(np.float32)
        bad = ~np.isfinite(v)
        if bad.any():
            _note(reasons, np.flatnonzero(bad),
                  f"input {inp.name!r}: field {col!r} is missing, null or not finite")
            v[bad] = 0
        out[:, j] = v
    return out, reasons


def tensor(inp: ModelInput, arr: pa.Array, limits: Limits,
           conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    n = len(arr)
    shape = inp.shape
    size = int(np.prod(shape))
    dtype = tensor_dtype(inp)
    out: np.ndarray = np.zeros((n, *shape), dtype)
    reasons: Reasons = {}
    if isinstance(arr.type, pa.FixedShapeTensorType):
        got = tuple(arr.type.shape)
        if got != tuple(shape):
            _note(reasons, range(n), f"input {inp.name!r}: wrong tensor shape {got}, the model "
                                     f"takes {tuple(shape)}")
            return out, reasons
        arr = arr.storage
    bad = np.zeros(n, bool)
    row_of = np.arange(n)
    levels = (size,) if (pa.types.is_fixed_size_list(arr.type) and arr.type.list_size == size
                         and len(shape) > 1
                         and not pa.types.is_list(arr.type.value_type)
                         and not pa.types.is_fixed_size_list(arr.type.value_type)
                         and not pa.types.is_large_list(arr.type.value_type)) else shape
    for depth, d in enumerate(levels):
        t = arr.type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t)):
            _note(reasons, np.unique(row_of[~bad[row_of]]) if depth else range(n),
                  f"input {inp.name!r}: wrong tensor shape, the model takes {tuple(shape)} "
                  f"(nested {depth} deep)")
            return out, reasons
        lens = np.asarray(pc.list_value_length(arr).fill_null(-1), np.int64)
        wrong = lens != d
        if wrong.any():
            rows = np.unique(row_of[wrong])
            _note(reasons, rows, f"input {inp.name!r}: wrong tensor shape, the model takes "
                                 f"{tuple(shape)}")
            bad[rows] = True
        parents = np.asarray(pc.list_parent_indices(arr), np.int64)
        row_of = row_of[parents]
        arr = arr.flatten()
    t = arr.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_null(t)):
        _note(reasons, range(n), f"input {inp.name!r}: wrong tensor dtype {t}, the model takes "
                                 f"{inp.dtype}")
        return out, reasons
    if np.issubdtype(dtype, np.integer) and pa.types.is_floating(t):
        _note(reasons, range(n), f"input {inp.name!r}: wrong tensor dtype {t}, the model takes "
                                 f"{inp.dtype}")
        return out, reasons
    if arr.null_count:
        nulls = np.asarray(arr.is_null(), bool)
        rows = np.unique(row_of[nulls])
        _note(reasons, rows, f"input {inp.name!r}: tensor holds a null")
        bad[rows] = True
    with np.errstate(over="ignore", invalid="ignore"):
        vals = np.asarray(arr.fill_null(0) if arr.null_count else arr)
        if np.issubdtype(dtype, np.integer):
            info: Any = np.iinfo(dtype)
            over = (vals < info.min) | (vals > info.max)
            if over.any():
                rows = np.unique(row_of[over])
                _note(reasons, rows, f"input {inp.name!r}: tensor value out of {inp.dtype} range")
                bad[rows] = True
        else:
            fin = np.isfinite(vals.astype(np.float64, copy=False))
            if not fin.all():
                rows = np.unique(row_of[~fin])
                _note(reasons, rows, f"input {inp.name!r}: tensor holds a NaN or infinity")
                bad[rows] = True
    good = ~bad
    keep = good[row_of]
    if keep.any():
        out[good] = vals[keep].astype(dtype).reshape(-1, *shape)
    return out, reasons


def image(inp: ModelInput, arr: pa.Array, limits: Limits,
          conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    assert inp.height and inp.width and inp.channels
    n = len(arr)
    images = _images()
    spec = images.ImageSpec(inp.height, inp.width, inp.channels, limits.max_image_pixels)
    reasons: Reasons = {}
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
            or pa.types.is_null(arr.type)):
        out = np.zeros((n, *inp.row_shape), np.float32)
        _note(reasons, range(n), f"input {inp.name!r}: images must be binary (encoded JPEG or "
                                 f"PNG bytes), not {arr.type}")
        return out, reasons
    present = np.flatnonzero(~np.asarray(arr.is_null(), bool))
    if len(present) < n:
        _note(reasons, np.flatnonzero(np.asarray(arr.is_null(), bool)),
              f"input {inp.name!r} is missing")
    data = arr.take(pa.array(present)).to_pylist() if len(present) < n else arr.to_pylist()
    batch = images.decode_batch(data, spec)
    decoded, errors = batch.pixels, batch.errors
    if conversions is not None:
        conversions.update(batch.conversions)
    out = decoded if len(present) == n else np.zeros((n, *inp.row_shape), np.float32)
    if len(present) < n:
        out[present] = decoded
    for i, why in errors.items():
        reasons.setdefault(int(present[i]), f"input {inp.name!r}: {why}")
    return out, reasons


def strings(inp: ModelInput, arr: pa.Array, limits: Limits,
            conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    n = len(arr)
    reasons: Reasons = {}
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
            or pa.types.is_null(arr.type)):
        _note(reasons, range(n), f"input {inp.name!r}: expected a string, not {arr.type}")
        return np.full(n, "", object), reasons
    nulls = np.asarray(arr.is_null(), bool)
    if nulls.any():
        _note(reasons, np.flatnonzero(nulls), f"input {inp.name!r} is missing")
    out = np.asarray(arr.cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False), object)
    return out, reasons


def text(inp: ModelInput, arr: pa.Array, limits: Limits,
         conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    """``strings``, and a text of more tokens than the model reads is refused."""
    out, reasons = strings(inp, arr, limits, conversions)
    if inp.max_length and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        rows, counts = tokens.over_length(arr, inp.max_length)
        for r, c in zip(rows.tolist(), counts.tolist(), strict=True):
            reasons.setdefault(r, f"input {inp.name!r}: text of {c} tokens is over the "
                                  f"model's {inp.max_length}")
    return out, reasons
