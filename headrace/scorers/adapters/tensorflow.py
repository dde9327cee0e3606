"""TensorFlow / Keras 3 adapter: a ``tf.function`` with a fixed input signature.

One trace serves every batch size on CPU (the batch dimension is ``None``); on a GPU the batch is
padded to power-of-two buckets so kernels and memory plans are reused. Never ``model.predict``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"  # Keras reads it once, at its import

import keras
import numpy as np
import tensorflow as tf

from headrace.codecs import codec
from headrace.codecs.feeds import Feeder, keras_ids
from headrace.core.errors import ConfigError
from headrace.scorers.adapters import (
    Inputs,
    InputsFn,
    ModelFn,
    bucketed,
    chunked,
    chunked_inputs,
    rows_of,
)
from headrace.scorers.adapters.keras_backend import MODEL_FILE, check_backend
from headrace.scorers.wire.buffers import is_aligned
from headrace.store.manifest import Manifest
from headrace.store.signature import ModelInput

check_backend(keras, "tensorflow")


def tf_device(device: str) -> str:
    gpus = tf.config.list_physical_devices("GPU")
    if device == "cpu":
        return "/CPU:0"
    if device == "auto":
        return "/GPU:0" if gpus else "/CPU:0"
    index = int(device.split(":", 1)[1])
    if index >= len(gpus):
        raise ConfigError(f"device {device} requested but TensorFlow sees {len(gpus)} GPU(s)")
    return f"/GPU:{index}"


def as_tensor(x: np.ndarray) -> tf.Tensor:
    """The batch as a tensor: shared through DLPack when aligned (no copy), else copied."""
    if x.dtype == np.float32 and is_aligned(x):
        return tf.experimental.dlpack.from_dlpack(x.__dlpack__())
    return tf.convert_to_tensor(x, tf.float32)


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    dev = tf_device(device)
    with tf.device(dev):
        model = keras.saving.load_model(version_path / MODEL_FILE, compile=False)
    width = len(manifest.features)
    outputs = manifest.num_outputs

    @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32)])
    def forward(x: tf.Tensor) -> tf.Tensor:
        return model(x, training=False)

    def call(x: np.ndarray) -> np.ndarray:
        with tf.device(dev):
            y = forward(as_tensor(x))
        return np.asarray(y, dtype=np.float32).reshape(len(x), outputs)

    return bucketed(call, max_batch) if "GPU" in dev else chunked(call, max_batch)


def _spec(inp: ModelInput, feeder: Feeder | None = None) -> tf.TensorSpec:
    """What the model takes: the feeder's int ids, else what the kind's codec decodes to
    (strings, or its numeric dtype), as a tensor."""
    if feeder is not None:
        row = feeder(np.array([""], object)).shape[1:]  # (width,) for text, () for a category
        return tf.TensorSpec([None, *row], tf.int32, name=inp.name)
    c = codec(inp.kind)
    if c.strings:
        return tf.TensorSpec([None], tf.string, name=inp.name)
    return tf.TensorSpec([None, *inp.row_shape], tf.as_dtype(np.dtype(c.dtype(inp))),
                         name=inp.name)


def _to_tensor(x: np.ndarray, spec: tf.TensorSpec) -> tf.Tensor:
    if spec.dtype == tf.string:
        return tf.constant(x.astype(object), tf.string)
    if spec.dtype == tf.float32:
        return as_tensor(np.ascontiguousarray(x, np.float32))
    return tf.convert_to_tensor(x, spec.dtype)


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    """A functional Keras model called with a dict of named tensors; several outputs come back
    as a list (or a dict, ordered by the manifest's outputs)."""
    dev = tf_device(device)
    with tf.device(dev):
        model = keras.saving.load_model(version_path / MODEL_FILE, compile=False)
    signature = manifest.input_signature()
    outputs = manifest.output_signature()
    feeders = {inp.name: keras_ids(inp, version_path) for inp in signature}
    specs = {inp.name: _spec(inp, feeders[inp.name]) for inp in signature}
    names = [o.name for o in outputs]
    # A model whose string input is (batch, 1) takes the texts as a column.
    column = {inp.name for inp in signature if specs[inp.name].dtype == tf.string
              and _input_rank(model, inp.name) == 2}

    @tf.function(input_signature=[specs])
    def forward(x: dict[str, tf.Tensor]) -> list[tf.Tensor]:
        feed = {k: (tf.expand_dims(v, -1) if k in column else v) for k, v in x.items()}
        if len(feed) == 1 and len(model.inputs) == 1:
            y = model(next(iter(feed.values())), training=False)
        else:
            y = model(feed, training=False)
        if isinstance(y, dict):
            return [y[n] for n in names]
        return list(y) if isinstance(y, list | tuple) else [y]

    def call(inputs: Inputs) -> list[np.ndarray]:
        n = rows_of(inputs)
        with tf.device(dev):
            ys = forward({k: _to_tensor(_fed(feeders[k], inputs[k]), specs[k]) for k in specs})
        return [np.asarray(y, np.float32).reshape(n, o.width) for y, o in
                zip(ys, outputs, strict=True)]

    return chunked_inputs(call, max_batch, pad="GPU" in dev)


def _fed(feeder: Feeder | None, x: np.ndarray) -> np.ndarray:
    return x if feeder is None else feeder(x)


def _input_rank(model: keras.Model, name: str) -> int:
    for t in getattr(model, "inputs", None) or ():
        if getattr(t, "name", "").split(":")[0] == name:
            return len(t.shape)
    ins: list[Any] = list(getattr(model, "inputs", None) or ())
    return len(ins[0].shape) if len(ins) == 1 else 1
