"""JSON records to feature rows: one msgspec decoder typed for the model's features.

Each record is one JSON object holding every feature as a number (unknown fields ignored), so a
bad record costs exactly its own error and nothing is re-parsed. Only msgspec and numpy: the
decode helper process imports this module and nothing heavier.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from headrace.core.limits import MAX_RECORD_BYTES

# (position in the input, stage, reason) of each record that cannot be scored.
RowError = tuple[int, str, str]
# What ``decode_rows`` returns: good rows (float32), their positions, the bad ones' errors.
JsonRows = tuple[np.ndarray, np.ndarray, list[RowError]]


@functools.lru_cache(maxsize=64)
def _decoder(features: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    """Struct fields are positional names renamed to the features, so any feature name works."""
    fields = [(f"c{j}", float) for j in range(len(features))]
    record = msgspec.defstruct("Record", fields, rename=dict(zip(
        (f for f, _ in fields), features, strict=True)), gc=False)
    return msgspec.json.Decoder(record)


def decode_rows(values: Sequence[bytes | memoryview], features: Sequence[str]) -> JsonRows:
    """float32 matrix of the good records, their positions in ``values``, the bad ones' errors.

    A value out of float32 range becomes infinite (rejected later as not finite).
    """
    width = len(features)
    decode_one = _decoder(tuple(features)).decode
    astuple = msgspec.structs.astuple
    rows: list[tuple[float, ...]] = []
    errors: list[RowError] = []
    append = rows.append
    for i, v in enumerate(values):  # as fast as a comprehension, and each record parsed once
        if len(v) > MAX_RECORD_BYTES:
            errors.append((i, "decode", f"JSON payload of {len(v)} bytes exceeds the limit"))
            continue
        try:
            append(astuple(decode_one(v)))
        except msgspec.ValidationError as exc:
            errors.append((i, "validate", f"wrong JSON record: {exc}"))
        except msgspec.DecodeError as exc:
            errors.append((i, "decode", f"undecodable JSON record: {exc}"
                           if bytes(v).strip() else "empty JSON payload"))
        except RecursionError:  # msgspec recurses per level: [ x 100,000 must not kill us
            errors.append((i, "decode", "undecodable JSON record: nested too deep"))
    n = len(rows)
    with np.errstate(over="ignore"):
        x = np.fromiter(itertools.chain.from_iterable(rows), np.float64, n * width
                        ).reshape(n, width).astype(np.float32)
    if not errors:
        return x, np.arange(n, dtype=np.int64), errors
    ok = np.ones(len(values), bool)
    ok[[i for i, _, _ in errors]] = False
    return x, np.flatnonzero(ok).astype(np.int64), errors
