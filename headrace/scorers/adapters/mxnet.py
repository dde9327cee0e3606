"""MXNet adapter: an exported Gluon HybridBlock re-imported as a hybridized ``SymbolBlock``.

MXNet 1.9 needs NumPy < 2 and ``numpy.bool`` set before import. Batches are padded to
power-of-two buckets: a static-shape cached graph is then built once per bucket. A model with a
signature takes its inputs in signature order (the symbol's data names are the input names);
text is turned into token ids here, with the vocabulary file the version ships.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy

if "bool" not in vars(numpy):  # vars: hasattr would itself warn (numpy's __getattr__)
    numpy.bool = bool  # type: ignore[attr-defined]

with warnings.catch_warnings():
    # MXNet 1.9's import-time Future/Deprecation warnings about NumPy: nothing a user can act on.
    warnings.simplefilter("ignore", FutureWarning)  # scoped to this import
    warnings.simplefilter("ignore", DeprecationWarning)  # (scipy.sparse via mxnet too)
    import mxnet as mx
import numpy as np

from headrace.codecs import codec
from headrace.core.errors import ConfigError
from headrace.scorers.adapters import Inputs, InputsFn, ModelFn, bucketed, chunked_inputs, rows_of
from headrace.store import tokens
from headrace.store.manifest import Manifest
from headrace.store.signature import ModelInput

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


@contextlib.contextmanager
def _quiet_imports() -> Iterator[None]:
    """SymbolBlock.imports warns "Cannot decide type" for every exported graph: not a fault."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="mxnet")
        yield


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    ctx = mx_context(device)
    with _quiet_imports():
        net = mx.gluon.nn.SymbolBlock.imports(
            str(version_path / SYMBOL_FILE), ["data"], str(version_path / PARAMS_FILE), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    outputs = manifest.num_outputs

    def call(x: np.ndarray) -> np.ndarray:
        y = net(mx.nd.array(x, ctx=ctx, dtype="float32"))
        return np.asarray(y.asnumpy(), dtype=np.float32).reshape(len(x), outputs)

    return bucketed(call, max_batch)


def _feeder(inp: ModelInput, version_path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """The input as the trainer fed it: its codec's MXNet feed (text and categories become ids
    with the vocabulary file the version ships, by ``store.tokens`` on both sides)."""
    c = codec(inp.kind)
    vocab: list[str] = []
    if c.vocabulary:
        if not inp.vocabulary:
            raise ValueError(f"{inp.kind} input {inp.name!r} of an MXNet model needs a "
                             f"vocabulary file")
        vocab = tokens.read_vocabulary(version_path / inp.vocabulary)
    return lambda x: c.mxnet_feed(inp, x, vocab)


def _data_names(version_path: Path, names: list[str]) -> list[str]:
    """The symbol's data inputs for the signature's, in order: the input names when the export
    kept them, else Gluon's defaults (``data``; ``data0``, ``data1``... for several)."""
    inputs = set(mx.sym.load(str(version_path / SYMBOL_FILE)).list_inputs())
    if set(names) <= inputs:
        return names
    return ["data"] if len(names) == 1 else [f"data{i}" for i in range(len(names))]


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    ctx = mx_context(device)
    signature = manifest.input_signature()
    outputs = manifest.output_signature()
    names = [inp.name for inp in signature]
    with _quiet_imports():
        net = mx.gluon.nn.SymbolBlock.imports(
            str(version_path / SYMBOL_FILE), _data_names(version_path, names),
            str(version_path / PARAMS_FILE), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    feed = {inp.name: _feeder(inp, version_path) for inp in signature}

    def call(inputs: Inputs) -> list[np.ndarray]:
        n = rows_of(inputs)
        args = [mx.nd.array(feed[k](inputs[k]), ctx=ctx) for k in names]
        ys = net(*args)
        ys = list(ys) if isinstance(ys, list | tuple) else [ys]
        return [np.asarray(y.asnumpy(), np.float32).reshape(n, o.width)
                for y, o in zip(ys, outputs, strict=True)]

    return chunked_inputs(call, max_batch, pad=True)
