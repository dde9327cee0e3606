"""``tensor``: fixed-shape numeric arrays (a fixed-shape tensor column, or nested lists of one
shape), standardised inside the model with one mean and standard deviation; a 2-D or 3-D one
can be an image family's input (one channel, or channels last)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from headrace.codecs import columns, json_values
from headrace.codecs.arrow_types import ColumnError, tensor_shape, tensor_values
from headrace.codecs.registry import (
    Codec,
    as_is,
    float_input,
    floats,
    register,
    row_shape,
    same_shape,
    standardized,
    torch_standardized,
)
from headrace.codecs.stats import InputStats
from headrace.contracts import ModelSpec
from headrace.store.signature import InputKind, ModelInput
from headrace.streams.summaries import summarise  # encoded images, big tensors


def _dataset_input(names: tuple[str, ...], table: pa.Table, spec: ModelSpec
                   ) -> tuple[ModelInput, np.ndarray]:
    (name,) = names
    col = table.column(name)
    shape = tensor_shape(col)
    if shape is None:
        raise ColumnError("rows are not fixed-size numeric lists of one shape")
    values = tensor_values(col, shape)
    if not np.isfinite(values).all():
        raise ColumnError("tensor values contain NaN or infinite values")
    return ModelInput(name=name, kind=InputKind.TENSOR, shape=shape,
                      preprocessing=("standardize",)), values


def _check(inp: ModelInput) -> None:
    if not inp.shape:
        raise ValueError(f"tensor input {inp.name!r} needs a shape")


def _learn(inp: ModelInput, v: np.ndarray, max_tokens: int) -> InputStats:
    std = float(v.std(dtype=np.float64))
    return InputStats(np.array([v.mean(dtype=np.float64)], np.float32),
                      np.array([std if std > 1e-12 else 1.0], np.float32))


def _keras(keras: Any, inp: ModelInput, x: Any, st: InputStats) -> Any:
    if st.mean is None or st.std is None:
        return x
    m, s = float(st.mean[0]), float(st.std[0])
    return keras.layers.Rescaling(1.0 / s, offset=-m / s, name=f"standardize_{inp.name}")(x)


def _constants(inp: ModelInput, st: InputStats) -> dict[str, np.ndarray]:
    if st.mean is None or st.std is None:
        return {}
    return {"mean": st.mean.reshape(1), "scale": (1.0 / st.std).reshape(1)}


_standardize = standardized("tensor_standardize")


def _forward(F: Any, inp: ModelInput, x: Any, consts: dict[str, Any], st: InputStats) -> Any:
    x = _standardize(F, inp, x, consts, st)
    if len(inp.shape) == 2:  # one channel, channels first
        return F.expand_dims(x, axis=1)
    if len(inp.shape) == 3:  # channels last -> first
        return F.transpose(x, axes=(0, 3, 1, 2))
    return x


def _torch(torch: Any, inp: ModelInput, x: Any, consts: dict[str, Any], st: InputStats) -> Any:
    x = torch_standardized(torch, inp, x, consts, st)
    if len(inp.shape) == 2:  # one channel, channels first
        return x.unsqueeze(1)
    if len(inp.shape) == 3:  # channels last -> first
        return x.permute(0, 3, 1, 2)
    return x


def _tensor_type(inp: ModelInput) -> pa.DataType:
    leaf = pa.int64() if np.issubdtype(columns.tensor_dtype(inp), np.integer) else pa.float64()
    t: pa.DataType = leaf
    for _ in inp.shape:
        t = pa.list_(t)
    return t


def _empty(inp: ModelInput, n: int) -> np.ndarray:
    return np.zeros((n, *inp.row_shape), columns.tensor_dtype(inp))


CODEC = register(Codec(
    InputKind.TENSOR.value,
    infer=lambda col: tensor_shape(col) is not None,
    accepts=lambda col: tensor_shape(col) is not None,
    nulls=False, dataset_input=_dataset_input, check=_check,
    train_decode=as_is, learn=_learn, relayout=same_shape,
    family_kind=InputKind.TENSOR.value, spatial=lambda inp: len(inp.shape) in (2, 3),
    keras_input=float_input, keras_preprocess=_keras,
    vocabulary=False, mxnet_export=lambda inp: inp, mxnet_feed=floats,
    mxnet_feed_shape=row_shape, mxnet_constants=_constants, mxnet_forward=_forward,
    torch_forward=_torch,
    build=columns.present(columns.tensor, _empty), from_json=json_values.nested,
    json_type=_tensor_type, send_as=None, summary=summarise, dtype=columns.tensor_dtype))
