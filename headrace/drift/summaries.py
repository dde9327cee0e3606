"""Per-kind summaries: how a model input becomes the drift features it is profiled as.

One registry (``SUMMARIES``, input kind -> function) used by the trainer when it fits the profile
and by the scorer on every batch, so training and serving summarise a record identically:

* ``numeric``: one feature per column, named by the column (``size``).
* ``category``: the value itself, one feature named by the input (``colour``).
* ``image`` (float32 ``(height, width, channels)`` as the model takes it, 0..255): per record
  ``<input>:brightness`` (mean pixel value) and ``<input>:contrast`` (standard deviation of the
  pixel values). Size and aspect are not summarised: the scorer resizes every image to the
  model's size before a tap sees it, so they would be constant.
* ``text``: ``<input>:tokens`` (tokens per record after the model's standardisation) and
  ``<input>:unknown`` (share of those tokens outside the model's vocabulary; 0 for no tokens).
* ``tensor``: ``<input>:mean`` and ``<input>:std`` over the record's values.

The prediction is profiled too (``prediction_features``): ``prediction:class`` (the arg-max class,
a category) and ``prediction:score`` (its probability) for a classifier, ``prediction:value`` for
a regressor with one output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

# Text to standardised tokens per record (the model's own tokenizer: ``store.tokens``). The
# caller passes it, so this package stays below the model store.
Tokenize = Callable[[np.ndarray], pa.ListArray]

PREDICTION_CLASS = "prediction:class"
PREDICTION_SCORE = "prediction:score"
PREDICTION_VALUE = "prediction:value"


class ProfiledInput(BaseModel):
    """A model input as the profile summarises it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: str  # numeric | category | image | text | tensor
    columns: tuple[str, ...] = ()  # numeric: the record fields, in model order
    vocabulary: tuple[str, ...] = ()  # text: the tokens the model knows


Summary = Callable[[np.ndarray, ProfiledInput, Tokenize | None], dict[str, np.ndarray]]


def _numeric(values: np.ndarray, inp: ProfiledInput, _: Tokenize | None) -> dict[str, np.ndarray]:
    x = np.asarray(values)
    if x.ndim == 1:
        return {inp.columns[0] if inp.columns else inp.name: x}
    cols = np.ascontiguousarray(x.T)  # one pass; each column then reads contiguously
    return {c: cols[i] for i, c in enumerate(inp.columns)}


def _category(values: np.ndarray, inp: ProfiledInput, _: Tokenize | None
              ) -> dict[str, np.ndarray]:
    return {inp.name: np.asarray(values, dtype=object)}


def _per_record(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values)
    return x.reshape(len(x), -1)


def _image(values: np.ndarray, inp: ProfiledInput, _: Tokenize | None) -> dict[str, np.ndarray]:
    x = _per_record(values)
    mean = x.mean(axis=1, dtype=np.float64)
    return {f"{inp.name}:brightness": mean, f"{inp.name}:contrast": x.std(axis=1, dtype=np.float64)}


def _tensor(values: np.ndarray, inp: ProfiledInput, _: Tokenize | None) -> dict[str, np.ndarray]:
    x = _per_record(values)
    return {f"{inp.name}:mean": x.mean(axis=1, dtype=np.float64),
            f"{inp.name}:std": x.std(axis=1, dtype=np.float64)}


def _text(values: np.ndarray, inp: ProfiledInput, tokenize: Tokenize | None
          ) -> dict[str, np.ndarray]:
    if tokenize is None:
        raise ValueError(f"text input {inp.name!r} needs the model's tokenizer")
    tokens = tokenize(np.asarray(values, dtype=object))
    flat = tokens.flatten()
    rows = pc.list_parent_indices(tokens).to_numpy()
    real = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    known = pc.is_in(flat, value_set=pa.array(inp.vocabulary, pa.string())).to_numpy(
        zero_copy_only=False)
    n = len(tokens)
    count = np.bincount(rows[real], minlength=n).astype(np.float64)
    unknown = np.bincount(rows[real & ~known], minlength=n).astype(np.float64)
    share = np.divide(unknown, count, out=np.zeros(n), where=count > 0)
    return {f"{inp.name}:tokens": count, f"{inp.name}:unknown": share}


SUMMARIES: dict[str, Summary] = {"numeric": _numeric, "category": _category, "image": _image,
                                 "text": _text, "tensor": _tensor}


def register(kind: str, summary: Summary) -> None:
    """Summarise inputs of ``kind`` with ``summary`` (a later registration replaces it)."""
    SUMMARIES[kind] = summary


def input_features(inputs: Sequence[ProfiledInput], arrays: Mapping[str, np.ndarray], *,
                   tokenize: Tokenize | None = None) -> dict[str, np.ndarray]:
    """Every drift feature of a batch of records: input name -> values, one per record.
    Inputs missing from ``arrays`` (or of a kind without a summary) give no features."""
    out: dict[str, np.ndarray] = {}
    for inp in inputs:
        values = arrays.get(inp.name)
        summary = SUMMARIES.get(inp.kind)
        if values is not None and summary is not None:
            out.update(summary(values, inp, tokenize))
    return out


def prediction_features(scores: np.ndarray, classes: Sequence[str]) -> dict[str, np.ndarray]:
    """The prediction features of a batch of model outputs (one row per record)."""
    s = np.asarray(scores)
    if s.ndim == 1:
        s = s[:, None]
    if classes and s.shape[1] == len(classes):
        best = s.argmax(axis=1)
        return {PREDICTION_CLASS: np.asarray(classes, dtype=object)[best],
                PREDICTION_SCORE: s[np.arange(len(s)), best].astype(np.float64)}
    if s.shape[1] == 1:
        return {PREDICTION_VALUE: s[:, 0].astype(np.float64)}
    return {}
