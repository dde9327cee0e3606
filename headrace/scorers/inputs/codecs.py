"""The scorer's codec of each input kind, in one registry: how a kind's column is built from
Arrow (``build``), how one JSON field of it is read record by record (``from_json``) and typed
for the columnar JSON parse (``json_type``), which fields it reads and what its decoded column
holds. Every decode of ``scorers.inputs`` dispatches here; a kind with no codec fails loudly
(``UnknownKind``), never by falling into another kind's branch. A new kind is one module that
calls ``register`` (tests/scorers/test_input_codecs.py registers a toy one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from headrace.core.errors import PermanentError
from headrace.scorers.inputs import columns, json_values
from headrace.scorers.inputs.columns import Builder, Reasons
from headrace.store.signature import InputKind, ModelInput

FromJson = Callable[[list[object], ModelInput, str, Reasons], pa.Array]


class UnknownKind(PermanentError):
    """An input kind no scorer codec is registered for."""


@dataclass(frozen=True)
class Codec:
    kind: str
    build: Builder  # the batch's Arrow column(s) -> the model's array and bad rows' reasons
    from_json: FromJson  # one field's JSON values (one per record) -> an Arrow array
    json_type: Callable[[ModelInput], pa.DataType]  # that field's type in a columnar parse
    strings: bool = False  # the decoded column holds strings (object), not numbers
    dtype: Callable[[ModelInput], type] = lambda inp: np.float32
    multi_field: bool = False  # reads the input's ``columns`` (numeric), not its name
    row_bytes: Callable[[ModelInput], int] | None = None  # decoded bytes a row, if not shape
    reparse: bool = False  # a columnar parse's values still go through ``from_json``
    raw_types: tuple[str, ...] = ()  # content types of a raw message that is this one input

    def fields(self, inp: ModelInput) -> tuple[str, ...]:
        return tuple(inp.columns) if self.multi_field else (inp.name,)

    def empty(self, inp: ModelInput, n: int) -> np.ndarray:
        if self.strings:
            return np.full(n, "", object)
        return np.zeros((n, *inp.row_shape), self.dtype(inp))

    def bytes_per_row(self, inp: ModelInput) -> int:
        if self.row_bytes is not None:
            return self.row_bytes(inp)
        if self.strings:
            return 256  # strings: counted as 256
        return int(np.prod(inp.row_shape)) * np.dtype(self.dtype(inp)).itemsize


REGISTRY: dict[str, Codec] = {}


def register(codec: Codec) -> Codec:
    if codec.kind in REGISTRY:
        raise ValueError(f"input kind {codec.kind!r} has a codec already")
    REGISTRY[codec.kind] = codec
    return codec


def codec(kind: str) -> Codec:
    try:
        return REGISTRY[str(kind)]
    except KeyError:
        raise UnknownKind(f"no scorer codec for input kind {str(kind)!r} (known: "
                          f"{', '.join(sorted(REGISTRY))})") from None


def _empty_of(kind: str) -> Callable[[ModelInput, int], np.ndarray]:
    return lambda inp, n: codec(kind).empty(inp, n)


def _tensor_type(inp: ModelInput) -> pa.DataType:
    leaf = pa.int64() if np.issubdtype(columns.tensor_dtype(inp), np.integer) else pa.float64()
    t: pa.DataType = leaf
    for _ in inp.shape:
        t = pa.list_(t)
    return t


register(Codec(InputKind.NUMERIC.value, build=columns.numeric, from_json=json_values.numbers,
               json_type=lambda inp: pa.float64(), multi_field=True))
register(Codec(InputKind.TENSOR.value,
               build=columns.present(columns.tensor, _empty_of(InputKind.TENSOR.value)),
               from_json=json_values.nested, json_type=_tensor_type,
               dtype=columns.tensor_dtype))
register(Codec(InputKind.IMAGE.value,
               build=columns.present(columns.image, _empty_of(InputKind.IMAGE.value)),
               from_json=json_values.image_bytes, json_type=lambda inp: pa.string(),
               reparse=True, raw_types=("image/jpeg", "image/png")))
register(Codec(InputKind.CATEGORY.value,
               build=columns.present(columns.strings, _empty_of(InputKind.CATEGORY.value)),
               from_json=json_values.texts, json_type=lambda inp: pa.string(), strings=True,
               dtype=lambda inp: object))
register(Codec(InputKind.TEXT.value,
               build=columns.present(columns.text, _empty_of(InputKind.TEXT.value)),
               from_json=json_values.texts, json_type=lambda inp: pa.string(), strings=True,
               dtype=lambda inp: object))
