"""Text and category vocabularies as pure, columnar functions (pyarrow.compute, no per-token loop).

Both the trainer (which learns a vocabulary on the training split) and the scorer's MXNet
adapter (which applies the one a version ships) use this module, so they tokenize alike. The
standardisation is the one Keras ``TextVectorization`` applies by default (ASCII lower case, strip
ASCII punctuation, split on ASCII whitespace; Unicode spaces, full-width forms and combining
marks are left as they are), so a TensorFlow model given the same vocabulary produces the same
token ids, byte for byte (tested against the real layer on a Unicode corpus).

Ids: text ``0`` padding, ``1`` out of vocabulary, ``2 + i`` for ``vocabulary[i]``;
category ``0`` out of vocabulary, ``1 + i`` for ``vocabulary[i]`` (Keras ``StringLookup``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Keras' DEFAULT_STRIP_REGEX (keras.layers.TextVectorization), in RE2 syntax.
STRIP_REGEX = r"[!\"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~']"
PAD, OOV = 0, 1


def _strings(values: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    arr = values if isinstance(values, pa.Array) else pa.array(values, type=pa.string())
    if pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.string())
    return pc.fill_null(arr, "")


def split_tokens(texts: pa.Array | Sequence[str] | np.ndarray) -> pa.ListArray:
    """Standardised tokens per row."""
    # ASCII lower case, as tf.strings.lower (Keras) does by default.
    s = pc.replace_substring_regex(pc.ascii_lower(_strings(texts)), STRIP_REGEX, "")
    # ASCII whitespace only (space \t \n \v \f \r), as tf.strings.split: "check\u00a0my"
    # is one token in Keras, so it is one here (tests/store/test_tokens.py, a Unicode corpus).
    tokens: pa.ListArray = pc.ascii_split_whitespace(s)
    return tokens


def learn_vocabulary(texts: pa.Array | Sequence[str] | np.ndarray, *, max_tokens: int
                     ) -> list[str]:
    """The ``max_tokens - 2`` most frequent tokens (ties by token), most frequent first."""
    return _top(split_tokens(texts).flatten(), max_tokens - 2)


def learn_categories(values: pa.Array | Sequence[str] | np.ndarray, *, max_size: int = 100_000
                     ) -> list[str]:
    """Distinct category values, most frequent first (ties by value)."""
    return _top(_strings(values), max_size)


def _top(values: pa.Array, k: int) -> list[str]:
    if len(values) == 0 or k <= 0:
        return []
    counts = pc.value_counts(values)
    table = pa.table({"v": counts.field("values"), "n": counts.field("counts")})
    table = table.filter(pc.not_equal(table["v"], "")).sort_by([("n", "descending"),
                                                                ("v", "ascending")])
    out: list[str] = table["v"].slice(0, k).to_pylist()
    return out


def encode_text(texts: pa.Array | Sequence[str] | np.ndarray, vocabulary: Sequence[str], *,
                max_length: int) -> np.ndarray:
    """Token ids ``int32 (rows, max_length)``: truncated, zero-padded on the right."""
    tokens = split_tokens(texts)
    out = np.zeros((len(tokens), max_length), dtype=np.int32)
    flat = tokens.flatten()
    rows = pc.list_parent_indices(tokens).to_numpy()
    keep = pc.not_equal(flat, "")  # empty input and edge whitespace give empty tokens
    flat = flat.filter(keep)
    if len(flat) == 0:
        return out
    rows = rows[keep.to_numpy(zero_copy_only=False)]
    cols = np.arange(len(rows)) - np.searchsorted(rows, rows)  # position within its row
    ids = pc.index_in(flat, value_set=pa.array(list(vocabulary), type=pa.string()))
    ids = pc.fill_null(pc.add(ids, 2), OOV).to_numpy(zero_copy_only=False).astype(np.int32)
    fits = cols < max_length
    out[rows[fits], cols[fits]] = ids[fits]
    return out


def token_counts(texts: pa.Array | Sequence[str] | np.ndarray) -> np.ndarray:
    """Tokens per row after standardisation (``encode_text`` keeps the first ``max_length``)."""
    tokens = split_tokens(texts)
    flat = tokens.flatten()
    rows = pc.list_parent_indices(tokens).to_numpy()
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    return np.bincount(rows[keep], minlength=len(tokens)).astype(np.int64)


def over_length(texts: pa.Array | Sequence[str] | np.ndarray, max_length: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The rows of more than ``max_length`` tokens and their token counts, as ``token_counts``
    gives them. Only rows of at least ``2 * max_length`` bytes are tokenized: standardising
    only lowers ASCII and removes bytes, and ``n`` tokens take at least ``2n - 1`` bytes (one
    separator between two), so a shorter row cannot be over. On a scorer's batch of short texts
    that is one length kernel instead of the whole tokenizer."""
    arr = _strings(texts)
    lengths = pc.binary_length(arr).to_numpy(zero_copy_only=False)
    long = np.flatnonzero(lengths >= 2 * max_length)
    if not len(long):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    counts = token_counts(arr.take(pa.array(long)))
    over = counts > max_length
    return long[over].astype(np.int64), counts[over]


def encode_categories(values: pa.Array | Sequence[str] | np.ndarray,
                      vocabulary: Sequence[str]) -> np.ndarray:
    """Category ids ``int32 (rows,)``: 0 for a value not in the vocabulary."""
    ids = pc.index_in(_strings(values), value_set=pa.array(list(vocabulary), type=pa.string()))
    return np.asarray(pc.fill_null(pc.add(ids, 1), 0).to_numpy(zero_copy_only=False),
                      dtype=np.int32)


def write_vocabulary(path: Path, vocabulary: Sequence[str]) -> None:
    path.write_text(json.dumps(list(vocabulary), ensure_ascii=False))


def read_vocabulary(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
        raise ValueError(f"{path.name} is not a JSON list of strings")
    return data
