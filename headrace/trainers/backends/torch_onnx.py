"""A published torch version (``model.pt2``) as ONNX, and ONNX Runtime to check it.

``torch.onnx``'s torch.export-based exporter needs ``onnxscript`` (not installed here); the
TorchScript-based one traces the loaded program, which refuses ``train()``: a thin wrapper keeps
it in inference mode. The ONNX graph takes what ``model.pt2`` takes (float32 inputs ``x0``,
``x1``... in signature order, any batch size) and gives what it gives.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from headrace.store import tokens
from headrace.store.signature import ModelInput
from headrace.trainers.backends.base import PREDICT_BATCH
from headrace.trainers.backends.torch_families import dummy_inputs
from headrace.trainers.backends.torch_nn import MODEL_FILE
from headrace.trainers.inputs import Inputs, ModelPlan, as_inputs, host_arrays

OPSET = 17


class _Inference(torch.nn.Module):
    def __init__(self, program: torch.nn.Module) -> None:
        super().__init__()
        self.program = program

    def train(self, mode: bool = True) -> _Inference:  # the loaded program refuses train()
        return self

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.program(*xs)
        return out


def export(version_path: Path, signature: tuple[ModelInput, ...], out: Path) -> None:
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


class OnnxPredictor:
    """``model.onnx`` on ONNX Runtime (CPU), fed as the torch version is."""

    def __init__(self, path: Path, version_path: Path,
                 signature: tuple[ModelInput, ...]) -> None:
        import onnxruntime

        self.session = onnxruntime.InferenceSession(str(path),
                                                    providers=["CPUExecutionProvider"])
        self.plan = ModelPlan("?", signature, (), 0)
        self.vocabularies = {i.name: tokens.read_vocabulary(version_path / i.vocabulary)
                             for i in signature if i.vocabulary}

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        outs = []
        for i in range(0, len(inp), PREDICT_BATCH):
            arrays = host_arrays(inp[i:i + PREDICT_BATCH], self.plan, self.vocabularies)
            feed = {f"x{k}": a for k, a in enumerate(arrays)}
            outs.append(np.asarray(self.session.run(None, feed)[0], np.float32))
        return np.concatenate(outs) if outs else np.zeros((0, 1), np.float32)
