"""TensorFlow / Keras 3 adapter: a ``tf.function`` with a fixed input signature.

One trace serves every batch size on CPU (the batch dimension is ``None``); on a GPU the batch is
padded to power-of-two buckets so kernels and memory plans are reused. Never ``model.predict``.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from headrace.core.errors import ConfigError
from headrace.scorers.adapters import ModelFn, bucketed, chunked
from headrace.scorers.buffers import is_aligned
from headrace.store.manifest import Manifest

MODEL_FILE = "model.keras"


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
