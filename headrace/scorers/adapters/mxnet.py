"""MXNet adapter: an exported Gluon HybridBlock re-imported as a hybridized ``SymbolBlock``.

MXNet 1.9 needs NumPy < 2 and ``numpy.bool`` set before import. Batches are padded to
power-of-two buckets: a static-shape cached graph is then built once per bucket.
"""

from __future__ import annotations

from pathlib import Path

import numpy

if not hasattr(numpy, "bool"):
    numpy.bool = bool  # type: ignore[attr-defined]

import mxnet as mx
import numpy as np

from headrace.core.errors import ConfigError
from headrace.scorers.adapters import ModelFn, bucketed
from headrace.store.manifest import Manifest

SYMBOL_FILE = "model-symbol.json"
PARAMS_FILE = "model-0000.params"


def mx_context(device: str) -> mx.Context:
    gpus = mx.context.num_gpus()
    if device == "cpu" or (device == "auto" and gpus == 0):
        return mx.cpu()
    index = 0 if device == "auto" else int(device.split(":", 1)[1])
    if index >= gpus:
        raise ConfigError(f"device {device} requested but MXNet sees {gpus} GPU(s)")
    return mx.gpu(index)


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    ctx = mx_context(device)
    net = mx.gluon.nn.SymbolBlock.imports(
        str(version_path / SYMBOL_FILE), ["data"], str(version_path / PARAMS_FILE), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    outputs = manifest.num_outputs

    def call(x: np.ndarray) -> np.ndarray:
        y = net(mx.nd.array(x, ctx=ctx, dtype="float32"))
        return np.asarray(y.asnumpy(), dtype=np.float32).reshape(len(x), outputs)

    return bucketed(call, max_batch)
