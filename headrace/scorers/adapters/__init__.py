"""Model adapters: the only scorer modules that import an ML framework.

Each adapter module exposes ``load(version_path=, manifest=, device=, max_batch=)`` returning a
``ModelFn``: a callable on a float32 ``(rows, features)`` array returning ``(rows, outputs)``
float32 scores (tabular models: the fast path), and ``load_inputs(...)`` returning an
``InputsFn``: a callable on the decoded inputs by name (the manifest's ``input_signature``)
returning one float32 ``(rows, width)`` array per output, in ``output_signature`` order.
The framework is imported only when a model of that kind is loaded.

Which module loads a model is looked up by (the manifest's framework, the process's runtime):
the runtime (``HEADRACE_SCORER_RUNTIME``: tensorflow, jax, torch or onnxruntime) is chosen once
per process, before any Keras import (``select_runtime``), since Keras reads its backend at
import. The default ``tensorflow`` runtime runs each model on its own framework (Keras models on
TensorFlow, MXNet models on MXNet); ``jax`` and ``torch`` run Keras models on that Keras backend;
``onnxruntime`` runs a version's ONNX export (``headrace models export``) and no Keras at all.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from headrace.core import heap
from headrace.core.errors import ConfigError, PermanentError
from headrace.core.llvm_guard import before_torch, load_in_safe_order
from headrace.store.manifest import Manifest

load_in_safe_order()  # before any framework module of this package: see core.llvm_guard

ModelFn = Callable[[np.ndarray], np.ndarray]
Inputs = dict[str, np.ndarray]
InputsFn = Callable[[Inputs], list[np.ndarray]]

MIN_BUCKET = 64
RUNTIMES: dict[str, str | None] = {  # runtime -> the Keras backend it sets (None: no Keras)
    "tensorflow": "tensorflow", "jax": "jax", "torch": "torch", "onnxruntime": None}
DEFAULT_RUNTIME = "tensorflow"
ADAPTERS = {  # (framework, runtime) -> module
    ("tensorflow", "tensorflow"): "tensorflow",
    ("mxnet", "tensorflow"): "mxnet",
    ("tensorflow", "jax"): "keras_jax",
    ("tensorflow", "torch"): "keras_torch",
    ("torch", "tensorflow"): "pytorch",  # the default runtime: each model on its own framework
    ("torch", "torch"): "pytorch",
    ("torch", "onnxruntime"): "onnx_runtime",  # the version's ONNX export
    ("tensorflow", "onnxruntime"): "onnx_runtime",
    # An imported ONNX model (headrace.imports) is its own export: ONNX Runtime on every runtime.
    ("onnx", "tensorflow"): "onnx_runtime",
    ("onnx", "jax"): "onnx_runtime",
    ("onnx", "torch"): "onnx_runtime",
    ("onnx", "onnxruntime"): "onnx_runtime",
}
REDUCED_PRECISION = {"pytorch"}  # adapters that run --precision bf16/fp16 (adapters.precision)
_chosen: list[str] = []  # the process's runtime, once chosen


class Adapter(Protocol):
    def load(self, *, version_path: Path, manifest: Manifest, device: str,
             max_batch: int) -> ModelFn: ...

    def load_inputs(self, *, version_path: Path, manifest: Manifest, device: str,
                    max_batch: int) -> InputsFn: ...


def select_runtime(runtime: str) -> str:
    """Choose this process's runtime before any model loads; Keras's backend follows it (set
    in the environment here, as Keras reads it once at import). Raises ``ConfigError`` when
    another runtime was chosen, or Keras was already imported with another backend."""
    from headrace.scorers.adapters import keras_backend  # no framework import

    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown scorer runtime {runtime!r} (one of {', '.join(RUNTIMES)})")
    if _chosen and _chosen[0] != runtime:
        raise ConfigError(f"this process scores on the {_chosen[0]} runtime; {runtime} needs "
                          f"a process of its own")
    backend = RUNTIMES[runtime]
    if backend is not None:
        keras_backend.choose(backend)
    if not _chosen:
        _chosen.append(runtime)
    return runtime


def runtime() -> str:
    return _chosen[0] if _chosen else DEFAULT_RUNTIME


def adapter_for(framework: str, runtime_name: str | None = None) -> Adapter:
    """The adapter module for a model of ``framework`` on ``runtime_name`` (default: this
    process's runtime); ``PermanentError`` when that runtime cannot run such a model."""
    rt = runtime_name or runtime()
    module = ADAPTERS.get((str(framework), rt))
    if module is None:
        if not any(f == str(framework) for f, _ in ADAPTERS):
            raise ConfigError(f"no scorer adapter for framework {framework!r}")
        raise PermanentError(f"a {framework} model cannot run on the {rt} runtime (runtimes "
                             f"for it: {', '.join(r for f, r in ADAPTERS if f == framework)})")
    from headrace.scorers.adapters import precision  # no framework import

    if precision.precision() != "fp32" and module not in REDUCED_PRECISION:
        raise PermanentError(f"--precision {precision.precision()} is for torch models; a "
                             f"{framework} model on the {rt} runtime runs in fp32 only")
    # Only the first framework's import is frozen (~300k objects every collection then skips):
    # a later one may come with a swap, and freezing then would pin the serving model for good.
    first = not any(f"{__name__}.{m}" in sys.modules for m in ADAPTERS.values())
    before_torch()  # torch may come after TensorFlow (a swap): see core.llvm_guard
    mod: Adapter = importlib.import_module(f"{__name__}.{module}")
    if first:
        heap.freeze_imports()
    return mod


def buckets(max_batch: int) -> list[int]:
    """Powers of two from MIN_BUCKET up to ``max_batch`` (always included)."""
    out, b = [], MIN_BUCKET
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return out


def bucketed(fn: ModelFn, max_batch: int) -> ModelFn:
    """Pad each call up to a bucket size so a compiled graph sees only a few shapes."""
    sizes = np.asarray(buckets(max_batch))

    def call(x: np.ndarray) -> np.ndarray:
        parts = []
        for start in range(0, len(x), max_batch):
            chunk = x[start:start + max_batch]
            n = len(chunk)
            size = int(sizes[np.searchsorted(sizes, n)])
            if size != n:
                pad = np.zeros((size - n, x.shape[1]), dtype=x.dtype)
                chunk = np.concatenate([chunk, pad])
            parts.append(fn(chunk)[:n])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    return call


def chunked(fn: ModelFn, max_batch: int) -> ModelFn:
    """Call ``fn`` on at most ``max_batch`` rows at a time (memory bound on a device)."""

    def call(x: np.ndarray) -> np.ndarray:
        if len(x) <= max_batch:
            return fn(x)
        return np.concatenate([fn(x[s:s + max_batch]) for s in range(0, len(x), max_batch)])

    return call


def rows_of(inputs: Inputs) -> int:
    return len(next(iter(inputs.values())))


def chunked_inputs(fn: InputsFn, max_batch: int, *, pad: bool) -> InputsFn:
    """Call ``fn`` on at most ``max_batch`` rows at a time; ``pad``: up to a bucket size (a
    compiled graph then sees only a few shapes)."""
    sizes = np.asarray(buckets(max_batch))

    def call(inputs: Inputs) -> list[np.ndarray]:
        n = rows_of(inputs)
        parts: list[list[np.ndarray]] = []
        for start in range(0, max(n, 1), max_batch):
            chunk = {k: v[start:start + max_batch] for k, v in inputs.items()}
            m = rows_of(chunk)
            size = int(sizes[np.searchsorted(sizes, m)]) if pad else m
            if size != m:
                chunk = {k: np.concatenate([v, np.zeros((size - m, *v.shape[1:]), v.dtype)
                                            if v.dtype != object else
                                            np.full(size - m, "", object)])
                         for k, v in chunk.items()}
            parts.append([y[:m] for y in fn(chunk)])
        if len(parts) == 1:
            return parts[0]
        return [np.concatenate([p[j] for p in parts]) for j in range(len(parts[0]))]

    return call
