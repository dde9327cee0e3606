"""PyTorch adapter: a ``torch.export`` program (``model.pt2``) run under ``inference_mode``.

The program takes float32 inputs in signature order, as the trainer fed them
(``codecs.feeds.float_feeder``: text and categories become ids with the vocabulary file the version
ships). On a GPU the batch is padded to power-of-two buckets (kernels and memory plans are
reused); on the CPU any batch size runs as it comes. The manifest's ``model_format`` must
be one this adapter reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from headrace.codecs.feeds import float_feeder
from headrace.scorers.adapters import Inputs, InputsFn, ModelFn, bucketed, chunked, chunked_inputs
from headrace.scorers.adapters.torch_device import torch_device
from headrace.store.manifest import MODEL_FORMATS, Manifest

MODEL_FILE = "model.pt2"


def _program(version_path: Path, manifest: Manifest, dev: torch.device) -> torch.nn.Module:
    want = MODEL_FORMATS[manifest.framework]
    if manifest.model_format != want:
        raise ValueError(f"model format {manifest.model_format or 'unstated'!r} is not "
                         f"{want!r}, the one this scorer reads")
    module: torch.nn.Module = torch.export.load(version_path / MODEL_FILE).module().to(dev)
    return module


def load(*, version_path: Path, manifest: Manifest, device: str, max_batch: int) -> ModelFn:
    dev = torch_device(device)
    module = _program(version_path, manifest, dev)
    outputs = manifest.num_outputs

    def call(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            y = module(torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(dev))
        return np.asarray(y.float().cpu().numpy(), np.float32).reshape(len(x), outputs)

    return bucketed(call, max_batch) if dev.type == "cuda" else chunked(call, max_batch)


def load_inputs(*, version_path: Path, manifest: Manifest, device: str,
                max_batch: int) -> InputsFn:
    dev = torch_device(device)
    module = _program(version_path, manifest, dev)
    signature = manifest.input_signature()
    outputs = manifest.output_signature()
    feed = {inp.name: float_feeder(inp, version_path) for inp in signature}

    def call(inputs: Inputs) -> list[np.ndarray]:
        args = [torch.from_numpy(feed[inp.name](inputs[inp.name])).to(dev)
                for inp in signature]
        n = len(args[0])
        with torch.inference_mode():
            ys = module(*args)
        ys = list(ys) if isinstance(ys, list | tuple) else [ys]
        return [np.asarray(y.float().cpu().numpy(), np.float32).reshape(n, o.width)
                for y, o in zip(ys, outputs, strict=True)]

    return chunked_inputs(call, max_batch, pad=dev.type == "cuda")
