"""A published torch version (``model.pt2``) as ONNX.

``torch.onnx``'s torch.export-based exporter needs ``onnxscript`` (not installed here); the
TorchScript-based one traces the loaded program, which refuses ``train()``: a thin wrapper keeps
it in inference mode. The ONNX graph takes what ``model.pt2`` takes (float32 inputs ``x0``,
``x1``... in signature order, any batch size: the ``float32`` feed of ``codecs.feeds``) and
gives what it gives.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from headrace.store.manifest import Manifest
from headrace.trainers.backends.torch_families import dummy_inputs
from headrace.trainers.backends.torch_nn import MODEL_FILE
from headrace.trainers.inputs import ModelPlan

OPSET = 17
FEED = "float32"


class _Inference(torch.nn.Module):
    def __init__(self, program: torch.nn.Module) -> None:
        super().__init__()
        self.program = program

    def train(self, mode: bool = True) -> _Inference:  # the loaded program refuses train()
        return self

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.program(*xs)
        return out


def export(version_path: Path, manifest: Manifest, out: Path) -> list[str]:
    """Write ``out``; the graph's input names in signature order."""
    signature = manifest.input_signature()
    program = torch.export.load(version_path / MODEL_FILE).module()
    plan = ModelPlan("?", signature, (), 0)
    names = [f"x{i}" for i in range(len(signature))]
    axes = {n: {0: "rows"} for n in [*names, "y"]}
    with warnings.catch_warnings():  # the TorchScript-based exporter's deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # the program's shape checks
        torch.onnx.export(_Inference(program), dummy_inputs(plan), str(out), dynamo=False,
                          input_names=names, output_names=["y"], dynamic_axes=axes,
                          opset_version=OPSET)
    return names

