"""The one registry of input kinds: per kind, one :class:`Codec` holding every piece of its life.

A codec is built with every piece (the dataclass has no defaults for them), so a kind missing a
piece fails when its module is imported, and a kind with no codec fails loudly (``UnknownKind``,
permanent) wherever it is looked up, never by falling into another kind's branch. Framework
pieces get the framework module as their first argument (``keras``, MXNet's ``F``): the codec
modules import no framework, only the trainer backends and scorer adapters do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs.columns import Builder
from headrace.codecs.stats import InputStats
from headrace.contracts import ModelSpec
from headrace.core.errors import PermanentError
from headrace.store.signature import InputKind, Kind, KindName, ModelInput

FromJson = Callable[[list[object], ModelInput, str, dict[int, str]], pa.Array]


class UnknownKind(PermanentError):
    """An input kind no codec is registered for."""


@dataclass(frozen=True)
class Codec:
    kind: str
    # --- datasets put and the training set ---
    # Whether an unforced column is of this kind (tried by ``infer_rank``); None: the kind is
    # only ever forced (``datasets put --kind COLUMN=KIND``).
    infer: Callable[[pa.ChunkedArray], bool] | None
    accepts: Callable[[pa.ChunkedArray], bool]  # a column forced to this kind can hold it
    nulls: bool  # a feature column of this kind may hold nulls
    # The input and its training array from its column(s) (``multi_field``: all of them).
    dataset_input: Callable[[tuple[str, ...], pa.Table, ModelSpec],
                            tuple[ModelInput, np.ndarray]]
    check: Callable[[ModelInput], None]  # the fields this kind needs (ValueError, one line)
    # --- training ---
    train_decode: Callable[[ModelInput, np.ndarray], np.ndarray]  # stored rows -> model's raw
    learn: Callable[[ModelInput, np.ndarray, int], InputStats]  # (input, rows, max_tokens)
    # Another model's input laid out from this job's rows (None: it cannot take them).
    relayout: Callable[[ModelInput, ModelInput, np.ndarray], np.ndarray | None]
    family_kind: str  # the kind the family table admits it as (a built-in: itself)
    spatial: Callable[[ModelInput], bool]  # can be an image family's one input
    # --- the preprocessing exported inside the model, per framework ---
    keras_input: Callable[[Any, ModelInput], Any]  # (keras, input) -> keras.Input
    keras_preprocess: Callable[[Any, ModelInput, Any, InputStats], Any]  # -> the tensor
    vocabulary: bool  # an MXNet export ships vocabulary-<input>.json; its feed needs it
    mxnet_export: Callable[[ModelInput], ModelInput]  # the input as the MXNet manifest says
    mxnet_feed: Callable[[ModelInput, np.ndarray, Sequence[str]], np.ndarray]  # host, float32
    mxnet_feed_shape: Callable[[ModelInput], tuple[int, ...]]  # per row, of ``mxnet_feed``
    mxnet_constants: Callable[[ModelInput, InputStats], dict[str, np.ndarray]]  # in the graph
    # (F, input, x, this input's constants by name, stats) -> the body's input
    mxnet_forward: Callable[[Any, ModelInput, Any, dict[str, Any], InputStats], Any]
    # torch's export is fed as MXNet's (``mxnet_feed``, ``mxnet_constants`` as buffers):
    # (torch, input, x, this input's constants by name, stats) -> the body's input
    torch_forward: Callable[[Any, ModelInput, Any, dict[str, Any], InputStats], Any]
    # --- the scorer's decode ---
    build: Builder  # the batch's Arrow column(s) -> the model's array and bad rows' reasons
    from_json: FromJson  # one field's JSON values (one per record) -> an Arrow array
    json_type: Callable[[ModelInput], pa.DataType]  # that field's type in a columnar parse
    # --- the CLI ---
    send_as: str | None  # how ``send`` types its fields: "number", "string", None (as read)
    summary: Callable[[Any], Any]  # how ``tail`` shows one field's value
    # --- optional traits ---
    strings: bool = False  # the decoded column holds strings (object), not numbers
    dtype: Callable[[ModelInput], type] = lambda inp: np.float32
    multi_field: bool = False  # reads the input's ``columns`` (numeric), not its name
    row_bytes: Callable[[ModelInput], int] | None = None  # decoded bytes a row, if not shape
    reparse: bool = False  # a columnar parse's values still go through ``from_json``
    raw_types: tuple[str, ...] = ()  # content types of a raw message that is this one input
    tabular: bool = False  # one input of this kind is the scorer's tabular fast path
    infer_rank: int = 0  # lower is asked first: a kind claiming a narrower column goes first
    # A Keras model fed this kind's ids made on the host (text): whether a model takes them
    # (``exported``: as its manifest states the input, else as the training plan does), the
    # ids (int32, identical in training and scoring) and the input as a Keras manifest says.
    keras_fed: Callable[[ModelInput, bool], bool] = lambda inp, exported: False
    keras_ids: Callable[[ModelInput, np.ndarray, Sequence[str]], np.ndarray] | None = None
    keras_export: Callable[[ModelInput], ModelInput] = lambda inp: inp
    # The manifest format a scorer needs to feed this input (``store.manifest.FORMAT_VERSION``).
    format_needed: Callable[[ModelInput], int] = lambda inp: 2

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


def inferring() -> list[Codec]:
    """The codecs that infer kinds of unforced columns, in the order they are asked."""
    return sorted((c for c in REGISTRY.values() if c.infer is not None),
                  key=lambda c: c.infer_rank)


def register(codec: Codec) -> Codec:
    if codec.kind in REGISTRY:
        raise ValueError(f"input kind {codec.kind!r} has a codec already")
    if codec.kind == InputKind.LABEL:
        raise ValueError("the label is a column's kind, never an input's")
    REGISTRY[codec.kind] = codec
    return codec


def codec(kind: str) -> Codec:
    try:
        return REGISTRY[str(kind)]
    except KeyError:
        raise UnknownKind(f"no codec for input kind {str(kind)!r} (known: "
                          f"{', '.join(sorted(REGISTRY))})") from None


def kind(name: str) -> Kind:
    """A column's kind by name: a registered input kind or the label (UnknownKind otherwise)."""
    if name == InputKind.LABEL:
        return InputKind.LABEL
    codec(name)
    try:
        return InputKind(name)
    except ValueError:
        return KindName(name)


def check_signature(signature: Sequence[ModelInput]) -> None:
    """Every input's kind is registered and has the fields its kind needs (PermanentError)."""
    for inp in signature:
        try:
            codec(inp.kind).check(inp)
        except ValueError as exc:
            raise PermanentError(str(exc)) from None


def keras_feeder(inp: ModelInput, vocabulary: Sequence[str], *, exported: bool
                 ) -> Callable[[np.ndarray], np.ndarray] | None:
    """What turns the decoded rows into what a Keras model takes for ``inp`` (None: as they
    are): the trainer and the scorer's adapters build it alike, so their ids cannot differ."""
    c = codec(inp.kind)
    if c.keras_ids is None or not c.keras_fed(inp, exported):
        return None
    ids, vocab = c.keras_ids, list(vocabulary)
    return lambda values: ids(inp, values, vocab)


def vocabulary_file(name: str) -> str:
    """The file an MXNet export ships an input's vocabulary in."""
    return f"vocabulary-{name}.json"


def same_shape(got: ModelInput, want: ModelInput, values: np.ndarray) -> np.ndarray | None:
    """``relayout`` of a one-field kind: its rows as they are, when the row shapes agree."""
    return values if got.row_shape == want.row_shape else None


def as_is(inp: ModelInput, values: np.ndarray) -> np.ndarray:
    """``train_decode`` of a kind stored as the model takes it."""
    return values


def nothing_learned(inp: ModelInput, values: np.ndarray, max_tokens: int) -> InputStats:
    return InputStats()


def no_constants(inp: ModelInput, stats: InputStats) -> dict[str, np.ndarray]:
    return {}


def floats(inp: ModelInput, values: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    """``mxnet_feed`` of a numeric kind."""
    return np.asarray(values, np.float32)


def as_sent(value: Any) -> Any:
    """``summary`` of a kind whose values ``tail`` shows as they are."""
    return value


def row_shape(inp: ModelInput) -> tuple[int, ...]:
    return inp.row_shape


def never(inp: ModelInput) -> bool:
    return False


def float_input(keras: Any, inp: ModelInput) -> Any:
    return keras.Input(shape=inp.row_shape, dtype="float32", name=inp.name)


def string_input(keras: Any, inp: ModelInput) -> Any:
    return keras.Input(shape=(), dtype="string", name=inp.name)


def standardized(name: str) -> Callable[[Any, ModelInput, Any, dict[str, Any], InputStats],
                                        Any]:
    """``mxnet_forward`` over ``mean``/``scale`` constants (absent: no statistics learned)."""
    def forward(F: Any, inp: ModelInput, x: Any, consts: dict[str, Any],
                stats: InputStats) -> Any:
        if "mean" in consts:
            x = F.broadcast_mul(F.broadcast_sub(x, consts["mean"]), consts["scale"])
        return x
    forward.__name__ = name
    return forward


def torch_standardized(torch: Any, inp: ModelInput, x: Any, consts: dict[str, Any],
                       stats: InputStats) -> Any:
    """``torch_forward`` over ``mean``/``scale`` constants (absent: no statistics learned)."""
    return (x - consts["mean"]) * consts["scale"] if "mean" in consts else x
