"""Text to token ids with a version's vocabulary file, columnar (pyarrow.compute, no per-token
Python), for models that take ids rather than strings (MXNet text models).

The vocabulary file lists one token per line; line ``i`` (from 0) is id ``i + FIRST_ID``.
Id 0 pads, id 1 stands for a token not in the vocabulary. Text is lower-cased and split on
whitespace, the same on both sides of the model (trainer and scorer).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PAD_ID = 0
OOV_ID = 1
FIRST_ID = 2


def read_vocabulary(path: Path) -> pa.Array:
    lines = path.read_text(encoding="utf-8").splitlines()
    return pa.array([t for t in (line.strip() for line in lines) if t], pa.string())


def tokens(texts: pa.Array) -> pa.ListArray:
    """Each text's tokens: lower-cased, split on whitespace (a blank text: null, no tokens)."""
    trimmed = pc.utf8_trim_whitespace(pc.utf8_lower(texts.cast(pa.string())))
    blank = pc.equal(trimmed, "")
    return pc.utf8_split_whitespace(pc.if_else(blank, pa.scalar(None, pa.string()), trimmed))


def token_counts(texts: pa.Array) -> np.ndarray:
    """Tokens per text (null text: 0)."""
    return np.asarray(pc.list_value_length(tokens(texts)).fill_null(0), np.int64)


def encode(texts: pa.Array, vocabulary: pa.Array, max_length: int) -> np.ndarray:
    """int64 ids (rows, max_length): padded with ``PAD_ID``, cut at ``max_length`` tokens."""
    toks = tokens(texts)
    n = len(toks)
    lengths = np.asarray(pc.list_value_length(toks).fill_null(0), np.int64)
    flat = toks.flatten()
    idx = pc.index_in(flat, value_set=vocabulary)
    ids = np.asarray(pc.add(idx, FIRST_ID).fill_null(OOV_ID), np.int64)
    out = np.full((n, max_length), PAD_ID, np.int64)
    rows = np.repeat(np.arange(n), lengths)
    pos = np.arange(len(ids)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep = pos < max_length
    out[rows[keep], pos[keep]] = ids[keep]
    return out
