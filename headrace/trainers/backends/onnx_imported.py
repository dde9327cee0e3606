"""Imported ONNX versions (``headrace models import``), for evaluation only: a training job
compares its model with an imported production version on its validation rows through here.
They are never trained (``TrainRequested`` refuses framework ``onnx``)."""

from __future__ import annotations

from pathlib import Path

from headrace.contracts import Framework, ModelSpec, Task
from headrace.core.errors import ValidationFailed
from headrace.store.signature import ModelInput
from headrace.store.versions import read_manifest
from headrace.trainers.backends.base import Model, Predictor
from headrace.trainers.inputs import ModelPlan

MODEL_FILE = "model.onnx"


class OnnxImportedBackend:
    framework = Framework.ONNX

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int,
               plan: ModelPlan | None = None) -> Model:
        raise ValidationFailed("onnx models are imported (headrace models import), not trained")

    def load_exported(self, path: Path, *, task: Task, n_features: int,
                      signature: tuple[ModelInput, ...] = ()) -> Predictor:
        from headrace.trainers.onnx_export import OnnxPredictor

        record = read_manifest(path)[0].extra["onnx"]
        return OnnxPredictor(path / MODEL_FILE, path, signature, feed=str(record["feed"]),
                             names=[str(n) for n in record["inputs"]])

    def device(self) -> str:
        return "cpu"


BACKEND = OnnxImportedBackend()
