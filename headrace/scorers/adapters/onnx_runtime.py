"""ONNX Runtime: a version's ONNX export (``headrace models export NAME:VERSION --format onnx``,
``exports/onnx/`` beside the version) scored by an ``InferenceSession``; no torch, TensorFlow or
Keras is imported. An imported ONNX version (framework ``onnx``, ``headrace models import``)
is its own export: ``model.onnx`` in the version, fed as its manifest's ``extra.onnx`` says
(``decoded``: each input as its codec decodes it, a column where the graph wants one).

The export's record (``export.json``) says how its graph is fed: ``float32`` (a torch version's
export: inputs ``x0``, ``x1``... in signature order, each kind's ``mxnet_feed``, as the torch
adapter feeds ``model.pt2``) or ``keras`` (a Keras version's: inputs by name, text as ids, the
rest as decoded, as the TensorFlow adapter feeds ``model.keras``); each array is then cast to the
type the graph declares. ``--device``: ``cpu`` runs on the CPU provider, ``gpu:N`` on CUDA
device N (refused when this onnxruntime has no CUDA provider), ``auto`` on CUDA when it has one.
The CPU provider uses as many threads as the pod may use (``core.cpus``), or OMP_NUM_THREADS.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from headrace.codecs.feeds import FEEDS, onnx_cast
from headrace.core.cpus import cpu_limit
from headrace.core.errors import ConfigError, PermanentError
from headrace.core.types import Framework
from headrace.scorers.adapters import (
    Inputs,
    InputsFn,
    ModelFn,
    bucketed,
    chunked,
    chunked_inputs,
    rows_of,
)
from headrace.store.exports import Export, read_export
from headrace.store.manifest import Manifest

FORMAT = "onnx"
CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
ORT_ERRORS = (ort_state.Fail, ort_state.InvalidArgument, ort_state.InvalidGraph,
              ort_state.NoSuchFile, ort_state.RuntimeException, ort_state.NotImplemented,
              ort_state.InvalidProtobuf)


class MissingExport(ConfigError):
    """The version has no ONNX export: fatal for a scorer that has nothing else to serve."""


def providers(device: str, available: list[str]) -> list[Any]:
    """The execution providers ``--device`` asks for, from those this onnxruntime has."""
    if device == "cpu" or (device == "auto" and CUDA not in available):
        return [CPU]
    index = 0 if device == "auto" else int(device.split(":", 1)[1])
    if CUDA not in available:
        raise ConfigError(f"device {device} requested but this onnxruntime has no "
                          f"{CUDA} (it has {', '.join(available)}): install onnxruntime-gpu")
    return [(CUDA, {"device_id": index}), CPU]


def _threads() -> int:
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return int(omp) if omp.isdigit() and int(omp) > 0 else cpu_limit()


IMPORTED_FILE = "model.onnx"  # an imported ONNX version's model (``headrace.imports``)


def _export(version_path: Path, manifest: Manifest) -> Export:
    if manifest.framework == Framework.ONNX:  # the version is its own export; the manifest
        # verified its sha256 and records how it is fed (``extra.onnx``)
        return Export(path=version_path / IMPORTED_FILE, record=dict(manifest.extra["onnx"]))
    found = read_export(version_path, FORMAT)
    if found is None:
        ref = f"{manifest.name}:{manifest.version}"
        raise MissingExport(f"{ref} has no ONNX export, which the onnxruntime runtime scores: "
                            f"run `headrace models export {ref} --format onnx` first")
    return found


def session(version_path: Path, manifest: Manifest, device: str
            ) -> tuple[ort.InferenceSession, Export, bool]:
    """The export's session on the providers ``--device`` asks for; whether it is on CUDA."""
    found = _export(version_path, manifest)
    want = providers(device, ort.get_available_providers())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = _threads()
    opts.inter_op_num_threads = 1
    try:
        sess = ort.InferenceSession(str(found.path), sess_options=opts, providers=want)
    except ORT_ERRORS as exc:
        raise PermanentError(f"its ONNX export does not load on ONNX Runtime: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                             ) from None
    cuda = want[0] != CPU
    if cuda and CUDA not in sess.get_providers():  # CUDA's libraries failed to load
        raise ConfigError(f"device {device} requested but ONNX Runtime could not start "
                          f"{CUDA} (CUDA/cuDNN libraries missing?)")
    return sess, found, cuda


def _types(sess: ort.InferenceSession) -> dict[str, str]:
    """Each graph input's ONNX type, by name."""
    return {i.name: str(i.type) for i in sess.get_inputs()}


def _run(sess: ort.InferenceSession, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    try:
        return [np.asarray(y) for y in sess.run(None, feed)]
    except ORT_ERRORS as exc:  # a batch the graph refuses: the model's fault, not the record's
        raise RuntimeError(f"ONNX Runtime: {str(exc).splitlines()[0]}") from None


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    sess, _, cuda = session(version_path, manifest, device)
    ((name, onnx_type),) = _types(sess).items()
    outputs = manifest.num_outputs

    def call(x: np.ndarray) -> np.ndarray:
        (y, *_) = _run(sess, {name: onnx_cast(x, onnx_type)})
        return np.asarray(y, np.float32).reshape(len(x), outputs)

    return bucketed(call, max_batch) if cuda else chunked(call, max_batch)


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    sess, found, cuda = session(version_path, manifest, device)
    signature = manifest.input_signature()
    outputs = manifest.output_signature()
    feed_kind = str(found.record.get("feed", "float32"))  # the first torch exports said none
    if feed_kind not in FEEDS:
        raise PermanentError(f"its ONNX export is fed as {feed_kind!r}, which this scorer does "
                             f"not know (one of {', '.join(FEEDS)})")
    names = list(found.record.get("inputs") or [f"x{i}" for i in range(len(signature))])
    types = _types(sess)
    if sorted(names) != sorted(types):
        raise PermanentError(f"its ONNX graph takes {sorted(types)}, its record says {names}")
    feeders: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = [
        (inp.name, graph_name, FEEDS[feed_kind](inp, version_path))
        for inp, graph_name in zip(signature, names, strict=True)]

    def call(inputs: Inputs) -> list[np.ndarray]:
        n = rows_of(inputs)
        feed = {g: onnx_cast(f(inputs[k]), types[g]) for k, g, f in feeders}
        ys = _run(sess, feed)
        return [np.asarray(y, np.float32).reshape(n, o.width)
                for y, o in zip(ys, outputs, strict=True)]

    return chunked_inputs(call, max_batch, pad=cuda)

