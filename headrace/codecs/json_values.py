"""One JSON field's values (one per record) to an Arrow array of the input kind's type, for
the per-record path of ``decode_inputs``; a value that does not fit is None with its reason."""

from __future__ import annotations

import binascii
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs.columns import Reasons, tensor_dtype
from headrace.store.signature import ModelInput


def numbers(values: list[Any], inp: ModelInput, col: str, pre: Reasons) -> pa.Array:
    try:
        if not any(v is True or v is False for v in values):
            return pa.array(values, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass

    def number(v: Any) -> float:
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        raise _Refused(f"input {inp.name!r}: field {col!r} is not a number")

    return _each(values, pre, number, pa.float64())


def image_bytes(values: list[Any], inp: ModelInput, col: str, pre: Reasons) -> pa.Array:

    def image(v: Any) -> bytes:
        if isinstance(v, bytes):
            return v  # a raw image message
        if not isinstance(v, str):
            raise _Refused(f"input {inp.name!r}: an image must be a base64 string")
        try:
            return binascii.a2b_base64(v, strict_mode=True)
        except (binascii.Error, ValueError):
            raise _Refused(f"input {inp.name!r}: not base64 of an encoded image") from None

    return _each(values, pre, image, pa.binary())


def nested(values: list[Any], inp: ModelInput, col: str, pre: Reasons) -> pa.Array:
    """Nested arrays as a list-of-lists array as deep as the tensor's shape; rows that do not
    fit that type (strings, another depth) are found one by one, only when some do not."""
    leaf = pa.int64() if np.issubdtype(tensor_dtype(inp), np.integer) else pa.float64()
    target: pa.DataType = leaf
    for _ in inp.shape:
        target = pa.list_(target)
    try:
        return pa.array(values, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    good: list[Any] = []
    for k, v in enumerate(values):
        try:
            pa.array([v], target)
            good.append(v)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pre.setdefault(k, f"input {inp.name!r}: wrong tensor dtype or shape, the model takes "
                              f"{inp.dtype} {tuple(inp.shape)}")
            good.append(None)
    return pa.array(good, target)


def texts(values: list[Any], inp: ModelInput, col: str, pre: Reasons) -> pa.Array:

    def text(v: Any) -> str:
        if isinstance(v, str):
            return v
        raise _Refused(f"input {inp.name!r}: expected a string")

    return _each(values, pre, text, pa.string())


class _Refused(Exception):
    """A value ``_each``'s converter does not take; the message is the row's reason."""


def _each(values: list[Any], pre: Reasons, convert: Callable[[Any], Any],
          typ: pa.DataType) -> pa.Array:
    """One value per row through ``convert``: a missing value stays None, a refused one is
    None with its reason."""
    out: list[Any] = []
    for k, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(convert(v))
        except _Refused as e:
            pre.setdefault(k, str(e))
            out.append(None)
    return pa.array(out, typ)
