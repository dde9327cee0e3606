"""``category``: one string (or number) field a row, looked up in the vocabulary learned on the
training split and one-hot encoded inside the model. Every framework's export ships the
vocabulary and its feed turns strings into ids on the host with ``store.tokens``, so a Keras
model takes int32 ids and runs on any backend; a Keras version whose manifest names no
vocabulary file (before format 2) looks its strings up itself (``StringLookup``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs import columns, json_values
from headrace.codecs.arrow_types import is_numeric, is_string, string_values
from headrace.codecs.registry import (
    Codec,
    as_is,
    as_sent,
    never,
    no_constants,
    register,
    same_shape,
    string_input,
    vocabulary_file,
)
from headrace.codecs.stats import InputStats
from headrace.contracts import ModelSpec
from headrace.store import tokens
from headrace.store.signature import InputKind, ModelInput


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    (name,) = names
    return ModelInput(name=name, kind=InputKind.CATEGORY, dtype="string",
                      preprocessing=("vocabulary", "one_hot")), string_values(table.column(name))


def _learn(inp: ModelInput, v: np.ndarray, max_tokens: int) -> InputStats:
    return InputStats(vocabulary=tuple(tokens.learn_categories(v)))


def in_graph(inp: ModelInput, *, exported: bool) -> bool:
    """Whether a Keras model looks the strings up itself: an export with no vocabulary file,
    or a training plan with no vocabulary step."""
    if exported:
        return inp.vocabulary is None
    return "vocabulary" not in inp.preprocessing


def _keras_input(keras: Any, inp: ModelInput) -> Any:
    if in_graph(inp, exported=False):
        return string_input(keras, inp)
    return keras.Input(shape=(), dtype="int32", name=inp.name)


def _keras(keras: Any, inp: ModelInput, x: Any, st: InputStats) -> Any:
    # Id 0 is "not in the vocabulary", as StringLookup's one out-of-vocabulary index.
    depth = len(st.vocabulary) + 1 if st.vocabulary else 2
    if not in_graph(inp, exported=False):
        return keras.layers.CategoryEncoding(num_tokens=depth, output_mode="one_hot",
                                             name=f"one_hot_{inp.name}")(x)
    return keras.layers.StringLookup(vocabulary=list(st.vocabulary) or ["?"],
                                     output_mode="one_hot", name=f"lookup_{inp.name}")(x)


def _ids(inp: ModelInput, v: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    return tokens.encode_categories(v, list(vocabulary)).astype(np.int32)


def _feed(inp: ModelInput, v: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    return _ids(inp, v, vocabulary).astype(np.float32)


def _forward(F: Any, inp: ModelInput, x: Any, consts: dict[str, Any], st: InputStats) -> Any:
    return F.one_hot(x, depth=len(st.vocabulary) + 1)  # id 0: not in the vocabulary


def _torch(torch: Any, inp: ModelInput, x: Any, consts: dict[str, Any], st: InputStats) -> Any:
    return torch.nn.functional.one_hot(x.long(), len(st.vocabulary) + 1).float()


def _empty(inp: ModelInput, n: int) -> np.ndarray:
    return np.full(n, "", object)


CODEC = register(Codec(
    InputKind.CATEGORY.value,
    infer=lambda col: is_string(col.type), infer_rank=1,  # after text: strings of few words
    accepts=lambda col: is_string(col.type) or is_numeric(col.type),
    nulls=False, dataset_input=_dataset_input, check=lambda inp: None,
    train_decode=as_is, learn=_learn, relayout=same_shape,
    family_kind=InputKind.CATEGORY.value, spatial=never,
    keras_input=_keras_input, keras_preprocess=_keras,
    vocabulary=True,
    mxnet_export=lambda inp: inp.model_copy(update={"vocabulary": vocabulary_file(inp.name)}),
    mxnet_feed=_feed, mxnet_feed_shape=lambda inp: (), mxnet_constants=no_constants,
    mxnet_forward=_forward, torch_forward=_torch,
    build=columns.present(columns.strings, _empty), from_json=json_values.texts,
    json_type=lambda inp: pa.string(), send_as="string", summary=as_sent, strings=True,
    dtype=lambda inp: object,
    keras_fed=lambda inp, exported: not in_graph(inp, exported=exported), keras_ids=_ids,
    keras_export=lambda inp: inp if in_graph(inp, exported=False) else inp.model_copy(
        update={"vocabulary": vocabulary_file(inp.name)})))
