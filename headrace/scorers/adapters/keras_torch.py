"""Keras on PyTorch: the model called under ``torch.inference_mode()`` on one device.

A plain ``model(x)`` on the torch backend records autograd state for every op (on a GPU:
MobileNetV2 ~11x slower than torchvision eager, ResNet-50 out of memory at batch 256), so every
call runs in inference mode. Keras's torch backend places what it makes on its current device
(``keras.device``): the model is loaded and called inside that scope. On a GPU each call is
padded to a power-of-two bucket (the caching allocator then reuses a few block sizes) and the
input is copied through a reused pinned buffer without blocking (``Staging``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["KERAS_BACKEND"] = "torch"  # Keras reads it once, at its import

import keras
import numpy as np
import torch

from headrace.scorers.adapters import (
    Inputs,
    InputsFn,
    ModelFn,
    bucketed,
    chunked,
    chunked_inputs,
    keras_backend,
    rows_of,
)
from headrace.scorers.adapters.torch_device import torch_device
from headrace.store.manifest import Manifest

keras_backend.check_backend(keras, "torch")



class Staging:
    """Reused page-locked host buffers, one per input (grown to the biggest batch seen), that
    each batch is copied through to a GPU: a copy from pinned memory runs ~4x a pageable one
    (54.6 vs 12.4 GB/s on an H200) and does not block. A buffer is reused only after the
    call before it read its outputs back, which waits for every copy queued before."""

    def __init__(self, dev: str) -> None:
        self.dev = dev
        self._bufs: dict[str, torch.Tensor] = {}

    def to_device(self, name: str, x: np.ndarray) -> torch.Tensor:
        x = np.ascontiguousarray(x)
        if self.dev == "cpu":
            return torch.from_numpy(x)
        buf = self._bufs.get(name)
        want = torch.from_numpy(x[:0]).dtype
        if (buf is None or buf.dtype != want or tuple(buf.shape[1:]) != x.shape[1:]
                or len(buf) < len(x)):
            buf = self._bufs[name] = torch.empty(x.shape, dtype=want, pin_memory=True)
        host = buf[:len(x)]
        host.numpy()[...] = x
        return host.to(self.dev, non_blocking=True)


def _load(version_path: Path, manifest: Manifest, dev: str) -> Any:
    with keras.device(dev):
        model = keras_backend.load_model(version_path, manifest, "torch")
    model.eval()  # a torch.nn.Module too: no dropout, batch norm from its running statistics
    return model


def forward(model: Any, dev: str, names: list[str]) -> Callable[[Any], list[np.ndarray]]:
    def run(x: Any) -> list[np.ndarray]:
        with torch.inference_mode(), keras.device(dev):
            ys = keras_backend.as_outputs(model(x, training=False), names)
            return [y.detach().to("cpu", torch.float32).numpy() for y in ys]

    return run


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    dev = str(torch_device(device))  # keras.device and Tensor.to take the name
    model = _load(version_path, manifest, dev)
    fn = forward(model, dev, ["output"])
    outputs = manifest.num_outputs
    staging = Staging(dev)

    def call(x: np.ndarray) -> np.ndarray:
        (y,) = fn(staging.to_device("x", np.asarray(x, np.float32)))
        return y.reshape(len(x), outputs)

    return bucketed(call, max_batch) if dev != "cpu" else chunked(call, max_batch)


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    dev = str(torch_device(device))  # keras.device and Tensor.to take the name
    model = _load(version_path, manifest, dev)
    outputs = manifest.output_signature()
    fn = forward(model, dev, [o.name for o in outputs])
    fed = keras_backend.host_feed(manifest, version_path)
    staging = Staging(dev)

    def call(inputs: Inputs) -> list[np.ndarray]:
        n = rows_of(inputs)
        x = {k: staging.to_device(k, v) for k, v in fed(inputs).items()}
        ys = fn(keras_backend.feed(model, x))
        return [y.reshape(n, o.width) for y, o in zip(ys, outputs, strict=True)]

    return chunked_inputs(call, max_batch, pad=dev != "cpu")
