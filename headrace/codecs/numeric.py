"""``numeric``: a dataset's number columns, fed as one float32 ``(len(columns),)`` row named
``features`` (the tabular matrix), standardised inside the model with the training split's
per-column mean and standard deviation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs import columns, json_values
from headrace.codecs.arrow_types import ColumnError, is_numeric
from headrace.codecs.registry import (
    Codec,
    as_sent,
    float_input,
    floats,
    never,
    register,
    row_shape,
    standardized,
    torch_standardized,
)
from headrace.codecs.stats import InputStats
from headrace.contracts import ModelSpec
from headrace.store.signature import InputKind, ModelInput

FEATURES = "features"  # the name of the numeric input (the scorer's tabular matrix)


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    x = np.stack([table.column(c).to_numpy().astype(np.float32) for c in names], axis=1)
    if not np.isfinite(x).all():
        raise ColumnError("features contain NaN or infinite values")
    return ModelInput(name=FEATURES, kind=InputKind.NUMERIC, columns=names, shape=(len(names),),
                      preprocessing=("standardize",)), x


def _check(inp: ModelInput) -> None:
    if not inp.columns:
        raise ValueError(f"numeric input {inp.name!r} names no columns")
    if inp.shape not in ((), (len(inp.columns),)):
        raise ValueError(f"numeric input {inp.name!r}: shape must be ({len(inp.columns)},)")


def _learn(inp: ModelInput, v: np.ndarray, max_tokens: int) -> InputStats:
    mean = v.mean(axis=0, dtype=np.float64)
    std = v.std(axis=0, dtype=np.float64)
    return InputStats(mean.astype(np.float32),
                      np.where(std > 1e-12, std, 1.0).astype(np.float32))


def _relayout(got: ModelInput, want: ModelInput, values: np.ndarray) -> np.ndarray | None:
    """Another model's numeric columns picked by name from this job's."""
    try:
        idx = [got.columns.index(c) for c in want.columns]
    except ValueError:
        return None
    return values[:, idx]


def _keras(keras: Any, inp: ModelInput, x: Any, st: InputStats) -> Any:
    if st.mean is None or st.std is None:
        return x  # no statistics learned (a bare matrix from an old caller)
    return keras.layers.Normalization(mean=st.mean.tolist(), variance=(st.std**2).tolist(),
                                      name=f"standardize_{inp.name}")(x)


def _constants(inp: ModelInput, st: InputStats) -> dict[str, np.ndarray]:
    if st.mean is None or st.std is None:
        return {}
    return {"mean": st.mean.reshape(1, -1), "scale": (1.0 / st.std).reshape(1, -1)}


CODEC = register(Codec(
    InputKind.NUMERIC.value,
    infer=lambda col: is_numeric(col.type), accepts=lambda col: is_numeric(col.type),
    nulls=False, dataset_input=_dataset_input, check=_check,
    train_decode=lambda inp, v: v, learn=_learn, relayout=_relayout,
    family_kind=InputKind.NUMERIC.value, spatial=never,
    keras_input=float_input, keras_preprocess=_keras,
    vocabulary=False, mxnet_export=lambda inp: inp, mxnet_feed=floats,
    mxnet_feed_shape=row_shape, mxnet_constants=_constants,
    mxnet_forward=standardized("numeric_forward"), torch_forward=torch_standardized,
    build=columns.numeric, from_json=json_values.numbers, json_type=lambda inp: pa.float64(),
    send_as="number", summary=as_sent, multi_field=True, tabular=True))
