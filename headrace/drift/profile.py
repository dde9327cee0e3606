"""The reference profile a model carries: fixed bins per feature, fitted on its training split.

Bins are fixed at training time (unlike Evidently, which bins reference and live data together),
so a live window is counted into them with one ``searchsorted`` and one ``bincount`` per feature.

* numeric: inner edges at the training values' deciles (``bins - 1`` quantiles, duplicates
  removed); bin ``i`` holds ``edges[i-1] < x <= edges[i]`` (``searchsorted(side="left")``), plus
  one last bin for missing values (NaN). Also moments and a sorted sample of up to
  ``SAMPLE_SIZE`` training values for the KS statistic.
* category: the training values, most frequent first (at most ``MAX_CATEGORIES``), plus one last
  "unseen" bucket, empty at training time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

BINS = 10
SAMPLE_SIZE = 1000
MAX_CATEGORIES = 256
BRANCHLESS_EDGES = 16


class NumericReference(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["numeric"] = "numeric"
    edges: tuple[float, ...]  # inner edges; len(expected) == len(edges) + 2 (last: missing)
    expected: tuple[float, ...]
    sample: tuple[float, ...]  # sorted, for KS
    rows: int
    mean: float
    std: float
    minimum: float
    maximum: float

    def bin_of(self, values: np.ndarray) -> np.ndarray:
        """Each value's bin: the number of edges below it (``searchsorted(side="left")``)."""
        x = np.asarray(values, dtype=np.float64)
        idx: np.ndarray
        if len(self.edges) <= BRANCHLESS_EDGES:
            # A compare-and-add pass per edge: on random data this is about half the time of a
            # binary search, whose branches mispredict (bench/bench_drift.py).
            idx = np.zeros(x.shape, np.uint8)
            for e in self.edges:
                idx += x > e
        else:
            idx = np.searchsorted(np.asarray(self.edges), x, side="left")
        missing = np.isnan(x)
        if missing.any():
            idx[missing] = len(self.edges) + 1  # NaN compares false: move it to "missing"
        return idx

    def count(self, values: np.ndarray) -> np.ndarray:
        """The window's counts per bin: the hot path (no index array is kept)."""
        return counts(self.bin_of(values), self.bins)

    @property
    def bins(self) -> int:
        return len(self.expected)


class CategoryReference(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["category"] = "category"
    values: tuple[str, ...]  # len(expected) == len(values) + 1 (last: unseen)
    expected: tuple[float, ...]
    rows: int

    def bin_of(self, values: np.ndarray | Sequence[str] | pa.Array) -> np.ndarray:
        arr = values if isinstance(values, pa.Array) else pa.array(
            np.asarray(values, dtype=object), type=pa.string())
        idx = pc.index_in(arr.cast(pa.string()), value_set=pa.array(self.values, pa.string()))
        return np.asarray(idx.fill_null(len(self.values)), dtype=np.int64)

    def count(self, values: np.ndarray | Sequence[str] | pa.Array) -> np.ndarray:
        return counts(self.bin_of(values), self.bins)

    @property
    def bins(self) -> int:
        return len(self.expected)


FeatureReference = Annotated[NumericReference | CategoryReference, Field(discriminator="kind")]


def counts(bin_index: np.ndarray, bins: int) -> np.ndarray:
    return np.bincount(np.asarray(bin_index, dtype=np.int64).ravel(), minlength=bins)


def numeric_reference(values: np.ndarray, *, bins: int = BINS, sample: int = SAMPLE_SIZE,
                      seed: int = 0) -> NumericReference:
    x = np.asarray(values, dtype=np.float64).ravel()
    finite = x[~np.isnan(x)]
    if finite.size == 0:
        raise ValueError("a numeric feature needs at least one non-missing training value")
    edges = np.unique(np.quantile(finite, np.linspace(0, 1, bins + 1)[1:-1]))
    rng = np.random.default_rng(seed)
    kept = finite if finite.size <= sample else rng.choice(finite, size=sample, replace=False)
    ref = NumericReference(
        edges=tuple(float(e) for e in edges), expected=(), sample=tuple(np.sort(kept).tolist()),
        rows=int(x.size), mean=float(finite.mean()), std=float(finite.std()),
        minimum=float(finite.min()), maximum=float(finite.max()))
    expected = counts(ref.bin_of(x), len(edges) + 2) / x.size
    return ref.model_copy(update={"expected": tuple(float(p) for p in expected)})


def category_reference(values: np.ndarray | Sequence[str],
                       *, max_categories: int = MAX_CATEGORIES) -> CategoryReference:
    arr = np.asarray(values, dtype=object).ravel()
    names, freq = np.unique(arr.astype(str), return_counts=True)
    order = np.lexsort((names, -freq))[:max_categories]
    ref = CategoryReference(values=tuple(str(v) for v in names[order]), expected=(),
                            rows=int(arr.size))
    expected = counts(ref.bin_of(arr), len(ref.values) + 1) / max(arr.size, 1)
    return ref.model_copy(update={"expected": tuple(float(p) for p in expected)})
