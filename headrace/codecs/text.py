"""``text``: one free-text field a row, lowercased, stripped of punctuation and split into at
most ``max_length`` tokens of the vocabulary learned on the training split.

The ids are made here, on the host, by ``store.tokens`` (:func:`token_ids`), for the trainer and
for every scorer adapter alike, with the vocabulary file the version ships: the exported model
takes integer ids, so it runs on any Keras backend (JAX and torch take no strings) and in
MXNet. A built-in family's input also carries hashed bigram ids (``bigrams:N`` in its
preprocessing): ``max_length`` token ids, then ``max_length`` ids of hashed bigrams, numbered
after the vocabulary's (0 where the pair runs into padding), hashed from the two token ids, so
no string is hashed twice and one embedding table can hold both (:func:`id_count`).

TensorFlow versions written before (no vocabulary file in the manifest's input) hold Keras'
``TextVectorization`` in their graph and take the strings: :func:`in_graph` says which."""

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
BIGRAM_BUCKETS = 1 << 15  # hashed bigram ids of a new built-in family's input
LEAD_SHARE = 3  # a new built-in family's input also marks its first third of tokens as lead
WIDE_SCALE = 16.0  # the text family's linear part: its mean of n-gram logits times this
CONV_WIDTH = 3  # the text family's convolution: tokens a window (word order past bigrams)
EMBEDDING_INIT = 0.05  # embeddings start uniform in +-this (Keras' default, every framework)


def conv_filters(embedding_dim: int) -> int:
    """The text family's convolution filters: twice the embedding's width."""
    return 2 * embedding_dim
_BIGRAMS = "bigrams:"
_LEAD = "lead:"
_MIX = 1_000_003  # odd multiplier of the pair hash (a prime: ids spread over the buckets)


def bigram_buckets(inp: ModelInput) -> int:
    """The hashed bigram buckets the input's ids carry (0: token ids alone)."""
    for step in inp.preprocessing:
        if step.startswith(_BIGRAMS):
            return int(step[len(_BIGRAMS):])
    return 0


def lead_share(inp: ModelInput) -> int:
    """``k`` where the input's ids repeat its first ``1/k`` of tokens as lead ids (0: none)."""
    for step in inp.preprocessing:
        if step.startswith(_LEAD):
            return int(step[len(_LEAD):])
    return 0


def format_needed(inp: ModelInput) -> int:
    """The manifest format a reader needs to feed this input: 3 for lead ids (a reader of
    format 2 would feed too few ids), else 2."""
    return 3 if lead_share(inp) else 2


def in_graph(inp: ModelInput, *, exported: bool) -> bool:
    """Whether a Keras model vectorises this input itself (takes strings): an export with no
    vocabulary file (versions before host-side ids), or, in training, an input whose plan has
    no vocabulary step (user code's raw input)."""
    if exported:
        return inp.vocabulary is None
    return "vocabulary" not in inp.preprocessing


def token_count(inp: ModelInput) -> int:
    """Token ids a row (the first ids; hashed bigrams follow when the input carries them)."""
    return inp.max_length or DEFAULT_LENGTH


def width(inp: ModelInput) -> int:
    """Ids a row: the tokens, then as many bigrams and as many lead ids when the input
    carries them."""
    n = inp.max_length or DEFAULT_LENGTH
    return n * (1 + (bigram_buckets(inp) > 0) + (lead_share(inp) > 0))


def token_ids(inp: ModelInput, values: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    """``int32 (rows, width(inp))``: what the model takes, identical in training and scoring."""
    ids = tokens.encode_text(values, list(vocabulary), max_length=inp.max_length or DEFAULT_LENGTH)
    buckets, share = bigram_buckets(inp), lead_share(inp)
    if not buckets and not share:
        return ids
    ids[ids[:, 0] == tokens.PAD, 0] = tokens.OOV  # no token reads as one unknown token: a
    # masked mean then always has something to average (else 0 / 0 on every backend)
    a = ids.astype(np.int64)
    first = len(vocabulary) + 2  # after the token ids: one embedding table holds them all
    blocks = [ids]
    if buckets:
        b = np.zeros_like(a)
        b[:, :-1] = a[:, 1:]
        pairs = np.where((a > 0) & (b > 0), first + 1 + (a * _MIX + b) % (buckets - 1), 0)
        blocks.append(pairs.astype(np.int32))
    if share:  # a token of the first 1/share of the text, as its own id: where it stands
        lead = -(-(a > 0).sum(axis=1, keepdims=True) // share)
        at = np.arange(a.shape[1])[None, :] < lead
        blocks.append(np.where(at & (a > 0), first + buckets + a, 0).astype(np.int32))
    return np.concatenate(blocks, axis=1)


def id_count(inp: ModelInput, vocabulary_size: int) -> int:
    """The ids' range (an embedding's rows): padding, unknown, the vocabulary, the bigrams,
    then padding, unknown and the vocabulary again as lead ids."""
    first = vocabulary_size + 2
    return first + bigram_buckets(inp) + (first if lead_share(inp) else 0)


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    (name,) = names
    return ModelInput(name=name, kind=InputKind.TEXT, dtype="string", max_length=spec.max_length,
                      preprocessing=("lowercase", "strip_punctuation", "vocabulary",
                                     f"{_BIGRAMS}{BIGRAM_BUCKETS}", f"{_LEAD}{LEAD_SHARE}")
                      ), string_values(table.column(name))


def _learn(inp: ModelInput, v: np.ndarray, max_tokens: int) -> InputStats:
    return InputStats(vocabulary=tuple(tokens.learn_vocabulary(v, max_tokens=max_tokens)))


def _keras_input(keras: Any, inp: ModelInput) -> Any:
    if in_graph(inp, exported=False):
        return string_input(keras, inp)
    return keras.Input(shape=(width(inp),), dtype="int32", name=inp.name)


def _keras(keras: Any, inp: ModelInput, x: Any, st: InputStats) -> Any:
    if not in_graph(inp, exported=False):
        return x  # ids from token_ids
    return keras.layers.TextVectorization(
        vocabulary=list(st.vocabulary) or ["?"],
        output_sequence_length=inp.max_length or DEFAULT_LENGTH,
        standardize="lower_and_strip_punctuation", split="whitespace",
        name=f"vectorize_{inp.name}")(x)


def _feed(inp: ModelInput, v: np.ndarray, vocabulary: Sequence[str]) -> np.ndarray:
    return token_ids(inp, v, vocabulary).astype(np.float32)  # exact: ids < 2**24


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
    keras_input=_keras_input, keras_preprocess=_keras,
    vocabulary=True,
    mxnet_export=lambda inp: inp.model_copy(update={"vocabulary": vocabulary_file(inp.name)}),
    mxnet_feed=_feed, mxnet_feed_shape=lambda inp: (width(inp),),
    mxnet_constants=no_constants,
    mxnet_forward=lambda F, inp, x, consts, st: x,  # token ids go to the body's embedding
    torch_forward=lambda torch, inp, x, consts, st: x.long(),
    build=columns.present(columns.text, _empty), from_json=json_values.texts,
    json_type=lambda inp: pa.string(), send_as="string", summary=as_sent, strings=True,
    dtype=lambda inp: object,
    keras_fed=lambda inp, exported: not in_graph(inp, exported=exported), keras_ids=token_ids,
    format_needed=format_needed,
    keras_export=lambda inp: inp if in_graph(inp, exported=False) else inp.model_copy(
        update={"vocabulary": vocabulary_file(inp.name)})))
