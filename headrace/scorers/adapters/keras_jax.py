"""Keras on JAX: the model's ``stateless_call`` under ``jax.jit``, its weights on one device.

Only the jitted path is fast on JAX (an eager ``model(x)`` dispatches op by op: ~4x slower
on a GPU, docs/scoring.md); a jitted function retraces for each new input shape, so every call
is padded to the power-of-two buckets the warm-up traced. The weights are put on the device
once; each batch is one host-to-device copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its import

import jax
import keras
import numpy as np

from headrace.core.errors import ConfigError
from headrace.scorers.adapters import (
    Inputs,
    InputsFn,
    ModelFn,
    bucketed,
    chunked_inputs,
    keras_backend,
    rows_of,
)
from headrace.store.manifest import Manifest

keras_backend.check_backend(keras, "jax")


def jax_device(device: str) -> Any:
    gpus = [d for d in jax.devices() if d.platform == "gpu"] if _has_gpu() else []
    if device == "cpu" or (device == "auto" and not gpus):
        return jax.devices("cpu")[0]
    index = 0 if device == "auto" else int(device.split(":", 1)[1])
    if index >= len(gpus):
        raise ConfigError(f"device {device} requested but JAX sees {len(gpus)} GPU(s)")
    return gpus[index]


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:  # no GPU backend in this jaxlib
        return False


def forward(model: Any, dev: Any, names: list[str]) -> Callable[[Any], list[Any]]:
    """``x -> outputs`` jitted over the model's weights, which live on ``dev``."""
    state = jax.device_put(([v.value for v in model.trainable_variables],
                            [v.value for v in model.non_trainable_variables]), dev)

    @jax.jit
    def run(state: Any, x: Any) -> list[Any]:
        y, _ = model.stateless_call(state[0], state[1], x, training=False)
        return keras_backend.as_outputs(y, names)

    return lambda x: run(state, x)


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    model = keras_backend.load_model(version_path, manifest, "jax")
    dev = jax_device(device)
    fn = forward(model, dev, ["output"])
    outputs = manifest.num_outputs

    def call(x: np.ndarray) -> np.ndarray:
        (y,) = fn(jax.device_put(np.asarray(x, np.float32), dev))
        return np.asarray(y, np.float32).reshape(len(x), outputs)

    return bucketed(call, max_batch)


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    model = keras_backend.load_model(version_path, manifest, "jax")
    dev = jax_device(device)
    outputs = manifest.output_signature()
    fn = forward(model, dev, [o.name for o in outputs])
    fed = keras_backend.host_feed(manifest, version_path)

    def call(inputs: Inputs) -> list[np.ndarray]:
        n = rows_of(inputs)
        x = {k: jax.device_put(v, dev) for k, v in fed(inputs).items()}
        ys = fn(keras_backend.feed(model, x))
        return [np.asarray(y, np.float32).reshape(n, o.width)
                for y, o in zip(ys, outputs, strict=True)]

    return chunked_inputs(call, max_batch, pad=True)
