"""What the host hands an exported model for each input, made by the input's codec with the
vocabulary file the version ships (``store.tokens``, as the trainer made them). One home for every
reader of an export: the torch adapter, ONNX Runtime on a torch export (the scorer's onnxruntime
runtime and the export's own check) take the ``float32`` feed; the TensorFlow adapter and ONNX
Runtime on a Keras export take the ``keras`` feed; so no two can feed a model differently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.codecs import codec, keras_feeder
from headrace.store import tokens
from headrace.store.signature import ModelInput

Feeder = Callable[[np.ndarray], np.ndarray]


def float_feeder(inp: ModelInput, version_path: Path) -> Feeder:
    """The input as a torch (or MXNet) export takes it: contiguous float32, categories and text
    as ids (``mxnet_feed``)."""
    c = codec(inp.kind)
    vocab: list[str] = []
    if c.vocabulary:
        if not inp.vocabulary:
            raise ValueError(f"{inp.kind} input {inp.name!r} needs a vocabulary file")
        vocab = tokens.read_vocabulary(version_path / inp.vocabulary)
    return lambda x: np.ascontiguousarray(c.mxnet_feed(inp, x, vocab), dtype=np.float32)


def keras_ids(inp: ModelInput, version_path: Path) -> Feeder | None:
    """The input's host-side ids for a Keras model (text, categories); None: the model takes
    the decoded array (numbers, images, or strings looked up inside a version's graph written
    before model format 2)."""
    vocab = tokens.read_vocabulary(version_path / inp.vocabulary) if inp.vocabulary else []
    return keras_feeder(inp, vocab, exported=True)


def keras_decoded(inp: ModelInput, version_path: Path) -> Feeder:
    """``keras_ids``, else the decoded array as it is."""
    ids = keras_ids(inp, version_path)
    return ids if ids is not None else (lambda x: x)


def decoded(inp: ModelInput, version_path: Path) -> Feeder:
    """The decoded array as it is, one value a row as a column ``(rows, 1)``: how converters
    (skl2onnx, onnxmltools) lay out one input per record field."""
    return lambda x: x.reshape(len(x), 1) if x.ndim == 1 else x


FEEDS: dict[str, Callable[[ModelInput, Path], Feeder]] = {
    "float32": float_feeder,  # torch exports (and their ONNX)
    "keras": keras_decoded,  # Keras models (and their ONNX)
    "decoded": decoded,  # imported ONNX models (headrace.imports)
}


# ONNX tensor types as NumPy dtypes: a feed is cast to the type the graph declares.
ONNX_DTYPES: dict[str, Any] = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int32)": np.int32,
    "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
    "tensor(string)": np.object_}


def onnx_cast(x: np.ndarray, onnx_type: str) -> np.ndarray:
    """``x`` as the ONNX graph's input of ``onnx_type`` takes it (contiguous; strings as str)."""
    dtype = ONNX_DTYPES.get(onnx_type)
    if dtype is None:
        raise ValueError(f"an ONNX input of type {onnx_type} is not fed here")
    if dtype is np.object_:
        return np.asarray(x, object).astype(str).astype(object)
    return np.ascontiguousarray(x, dtype)
