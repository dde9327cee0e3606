"""A model's signature: the inputs it takes and the outputs it gives, as the manifest states them.

This is the contract between trainers (which write it) and scorers (which decode every batch into
it). Preprocessing that lives inside the exported model (standardisation, rescaling, text
vectorisation, category lookup) is listed so an operator can see it, but the scorer never applies
it: it feeds raw values in the layout below.

Layouts the scorer feeds, per row (the batch dimension comes first and is not in ``shape``):

* ``numeric``  float32 ``(len(columns),)``: the record's fields named in ``columns``, in order.
* ``category`` string ``()``: one string field; the model maps it (lookup / one-hot / embedding).
* ``tensor``   ``dtype`` of ``shape``: a nested JSON array, or an Arrow fixed-size list / tensor.
* ``image``    float32 ``(height, width, channels)``, channels last, pixel values 0..255, after
  decoding (JPEG/PNG) and resizing to ``height`` x ``width``. Both frameworks take this layout;
  an MXNet export transposes to channels first inside its graph.
* ``text``     string ``()``: raw text. The model (TensorFlow) or the adapter from the files the
  version ships (MXNet, ``vocabulary``) turns it into tokens; ``max_length`` caps the tokens.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)

from headrace.core.types import Task


class InputKind(StrEnum):
    """The one enum of kinds: of a model's inputs and of a dataset's columns (``datasets put``
    records them; ``trainers.columns.ColumnKind`` is this enum). Each input kind has one codec
    module in ``headrace.codecs``, which holds everything the kind means; a kind added by a
    plug-in codec is a ``KindName``."""

    NUMERIC = "numeric"
    CATEGORY = "category"
    TENSOR = "tensor"
    IMAGE = "image"
    TEXT = "text"
    LABEL = "label"  # a dataset's label column: never a model input

    @classmethod
    def inputs(cls) -> tuple[InputKind, ...]:
        """The kinds a model input can have."""
        return tuple(k for k in cls if k != cls.LABEL)


class KindName(str):
    """A kind beyond the enum's built-ins, registered by its own codec module
    (``headrace.codecs.register``): a string that reads like an ``InputKind`` member."""

    __slots__ = ()

    @property
    def value(self) -> str:
        return str(self)


_KIND = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _kind(v: object) -> InputKind | KindName:
    """A built-in kind as the enum member; any other well-formed name as a ``KindName``, which
    the codec registry (above this layer) accepts or refuses when the input is used."""
    if isinstance(v, InputKind):
        return v
    if not isinstance(v, str) or not _KIND.match(v):
        raise ValueError(f"input kind {v!r} is not a kind name")
    try:
        return InputKind(v)
    except ValueError:
        return KindName(v)


Kind = Annotated[InputKind | KindName, PlainValidator(_kind), PlainSerializer(str, return_type=str),
                 WithJsonSchema({"type": "string"})]


class OutputKind(StrEnum):
    CLASSES = "classes"  # probabilities over ``classes``
    VALUES = "values"  # regression values of ``shape``


_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"


class ModelInput(BaseModel):
    """One input of the exported model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_NAME)  # JSON key / Arrow column / the model's input name
    kind: Kind  # what each kind needs of the fields below: its codec's ``check``
    dtype: str = "float32"  # float32 | int64 | uint8 | string
    shape: tuple[int, ...] = ()  # per row, without the batch dimension
    columns: tuple[str, ...] = ()  # numeric: the record fields, in model order
    # image: what the model takes; the scorer decodes and resizes to it
    height: int | None = Field(default=None, ge=1, le=16384)
    width: int | None = Field(default=None, ge=1, le=16384)
    channels: int | None = Field(default=None, ge=1, le=4)
    # text: the token cap and, for MXNet, the vocabulary file in the version directory
    max_length: int | None = Field(default=None, ge=1)
    vocabulary: str | None = None
    preprocessing: tuple[str, ...] = ()  # inside the model, e.g. ("standardize",)

    @model_validator(mode="after")
    def _consistent(self) -> ModelInput:
        if self.kind == InputKind.LABEL:  # the enum's own rule: a label is never an input
            raise ValueError(f"input {self.name!r}: the label is not a model input")
        return self

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The per-row shape the scorer feeds: one value per named column, an image's
        height x width x channels, else ``shape``."""
        if self.columns:
            return (len(self.columns),)
        if self.height and self.width and self.channels:
            return (self.height, self.width, self.channels)
        return self.shape


class ModelOutput(BaseModel):
    """One output of the exported model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_NAME)
    kind: OutputKind
    classes: tuple[str, ...] = ()  # CLASSES: names in output order
    shape: tuple[int, ...] = (1,)  # VALUES: per row

    @property
    def width(self) -> int:
        return len(self.classes) if self.kind == OutputKind.CLASSES else int(
            max(1, _prod(self.shape)))


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def tabular_inputs(features: tuple[str, ...]) -> tuple[ModelInput, ...]:
    """The signature of a model over flat numeric columns (every version before signatures)."""
    return (ModelInput(name="features", kind=InputKind.NUMERIC, columns=features,
                       shape=(len(features),)),)


def default_outputs(task: Task, classes: tuple[str, ...]) -> tuple[ModelOutput, ...]:
    if task == Task.CLASSIFIER:
        return (ModelOutput(name="scores", kind=OutputKind.CLASSES, classes=classes),)
    return (ModelOutput(name="value", kind=OutputKind.VALUES, shape=(1,)),)
