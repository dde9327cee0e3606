"""PyTorch adapter: a ``torch.export`` program (``model.pt2``), or an imported TorchScript
module (``model.ts``, ``headrace models import``), run under ``inference_mode``.

The program takes float32 inputs in signature order, as the trainer fed them
(``codecs.feeds.float_feeder``: text and categories become ids with the vocabulary file the
version ships). On a GPU the batch is padded to power-of-two buckets (kernels and memory plans
are reused); on the CPU any batch size runs as it comes. ``--precision bf16|fp16`` runs it under
``torch.autocast``, its labels checked against fp32 on a sample of live calls (``precision``).
The manifest's ``model_format`` must be one this adapter reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from headrace.codecs.feeds import float_feeder
from headrace.core.errors import ConfigError
from headrace.scorers.adapters import (
    Inputs,
    InputsFn,
    ModelFn,
    bucketed,
    chunked,
    chunked_inputs,
    precision,
)
from headrace.scorers.adapters.torch_device import torch_device
from headrace.store.manifest import READ_FORMATS, Manifest

MODEL_FILE = "model.pt2"
SCRIPT_FILE = "model.ts"


def _exported(version_path: Path, dev: torch.device) -> torch.nn.Module:
    module: torch.nn.Module = torch.export.load(version_path / MODEL_FILE).module().to(dev)
    return module


def _scripted(version_path: Path, dev: torch.device) -> torch.nn.Module:
    module: torch.nn.Module = torch.jit.load(str(version_path / SCRIPT_FILE), map_location=dev)
    return module.eval()


LOADERS: dict[str, Callable[[Path, torch.device], torch.nn.Module]] = {
    "torch.export/1": _exported, "torchscript/1": _scripted}


def _program(version_path: Path, manifest: Manifest, dev: torch.device) -> torch.nn.Module:
    readable = READ_FORMATS[manifest.framework]
    if manifest.model_format not in readable:
        raise ValueError(f"model format {manifest.model_format or 'unstated'!r} is not "
                         f"one this scorer reads ({', '.join(readable)})")
    return LOADERS[manifest.model_format](version_path, dev)


def _forward(module: torch.nn.Module, dev: torch.device, widths: list[int], ref: str
             ) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """The program on float32 arrays in signature order, in this process's precision: bf16 or
    fp16 under ``torch.autocast`` (matrix products and convolutions in half width, the rest,
    ids included, as they are), checked against fp32 on a sample (``precision.checked``)."""
    chosen = precision.precision()
    if chosen == "fp16" and dev.type != "cuda":
        raise ConfigError("--precision fp16 runs on a GPU only; on the CPU use bf16")

    def run(args: list[np.ndarray], half: torch.dtype | None) -> list[np.ndarray]:
        xs = [torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(dev) for a in args]
        n = len(args[0])
        with torch.inference_mode(), (torch.autocast(dev.type, dtype=half) if half is not None
                                      else contextlib.nullcontext()):
            ys = module(*xs)
        ys = list(ys) if isinstance(ys, list | tuple) else [ys]
        return [np.asarray(y.float().cpu().numpy(), np.float32).reshape(n, w)
                for y, w in zip(ys, widths, strict=True)]

    if chosen == "fp32":
        return lambda args: run(args, None)
    half = torch.bfloat16 if chosen == "bf16" else torch.float16
    return precision.checked(ref, lambda args: run(args, half), lambda args: run(args, None))


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    dev = torch_device(device)
    module = _program(version_path, manifest, dev)
    forward = _forward(module, dev, [manifest.num_outputs], _ref(manifest))

    def call(x: np.ndarray) -> np.ndarray:
        return forward([x])[0]

    return bucketed(call, max_batch) if dev.type == "cuda" else chunked(call, max_batch)


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    dev = torch_device(device)
    module = _program(version_path, manifest, dev)
    signature = manifest.input_signature()
    forward = _forward(module, dev, [o.width for o in manifest.output_signature()],
                       _ref(manifest))
    feed = {inp.name: float_feeder(inp, version_path) for inp in signature}

    def call(inputs: Inputs) -> list[np.ndarray]:
        return forward([feed[inp.name](inputs[inp.name]) for inp in signature])

    return chunked_inputs(call, max_batch, pad=dev.type == "cuda")


def _ref(manifest: Manifest) -> str:
    return f"{manifest.name}:{manifest.version}"
