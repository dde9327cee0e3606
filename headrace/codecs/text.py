"""``text``: one free-text field a row, lowercased, stripped of punctuation and split into at
most ``max_length`` tokens of the vocabulary learned on the training split: by Keras'
``TextVectorization`` inside a TensorFlow export, by ``store.tokens`` (the same rule) in an
MXNet export's feed, with the vocabulary file the version ships."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs import columns, json_values
from headrace.codecs.arrow_types import is_string, mean_words, string_values
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

TEXT_MIN_WORDS = 3.0  # a string column averaging this many words a row is text, else category
DEFAULT_LENGTH = 64  # tokens fed when an input states no max_length


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    (name,) = names
    return ModelInput(name=name, kind=InputKind.TEXT, dtype="string", max_length=spec.max_length,
                      preprocessing=("lowercase", "strip_punctuation", "vocabulary")
                      ), string_values(table.column(name))


def _learn(inp: ModelInput, v: np.ndarray, max_tokens: int) -> InputStats:
    return InputStats(vocabulary=tuple(tokens.learn_vocabulary(v, max_tokens=max_tokens)))


def _keras(keras: Any, inp: ModelInput, x: Any, st: InputStats) -> Any:
    return keras.layers.TextVectorization(
        vocabulary=list(st.vocabulary) or ["?"],
        output_sequence_length=inp.max_length or DEFAULT_LENGTH,
        standardize="lower_and_strip_punctuation", split="whitespace",
        name=f"vectorize_{inp.name}")(x)


def _feed(inp: ModelInput, v: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    return tokens.encode_text(v, list(vocabulary), max_length=inp.max_length or DEFAULT_LENGTH
                              ).astype(np.float32)


def _empty(inp: ModelInput, n: int) -> np.ndarray:
    return np.full(n, "", object)


CODEC = register(Codec(
    InputKind.TEXT.value,
    infer=lambda col: is_string(col.type) and mean_words(col) >= TEXT_MIN_WORDS,
    accepts=lambda col: is_string(col.type),
    nulls=True,  # a missing text is the empty text
    dataset_input=_dataset_input, check=lambda inp: None,
    train_decode=as_is, learn=_learn, relayout=same_shape,
    family_kind=InputKind.TEXT.value, spatial=never,
    keras_input=string_input, keras_preprocess=_keras,
    vocabulary=True,
    mxnet_export=lambda inp: inp.model_copy(update={"vocabulary": vocabulary_file(inp.name)}),
    mxnet_feed=_feed, mxnet_feed_shape=lambda inp: (inp.max_length or DEFAULT_LENGTH,),
    mxnet_constants=no_constants,
    mxnet_forward=lambda F, inp, x, consts, st: x,  # token ids go to the body's embedding
    torch_forward=lambda torch, inp, x, consts, st: x.long(),
    build=columns.present(columns.text, _empty), from_json=json_values.texts,
    json_type=lambda inp: pa.string(), send_as="string", summary=as_sent, strings=True,
    dtype=lambda inp: object))
