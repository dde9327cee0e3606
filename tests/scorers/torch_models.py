"""Small torch models with a signature, built by the trainer's torch backend (its families,
the preprocessing inside the module) and published through its own export: what a job writes,
without the training."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headrace.codecs import InputStats
from headrace.contracts import Framework, ModelSpec, Task
from headrace.core.llvm_guard import before_torch
from headrace.store.manifest import MODEL_FORMATS, Manifest
from headrace.store.signature import ModelInput, ModelOutput, default_outputs, tabular_inputs
from headrace.store.versions import ModelVersion, publish, set_alias
from headrace.trainers.inputs import ModelPlan, export_signature
from tests.scorers.signature_models import DIGITS, GRID, IMAGE, VOCAB

TEXT = ModelInput(name="text", kind="text", dtype="string", max_length=8)


def _publish(root: Path, name: str, plan: ModelPlan, spec: ModelSpec, *,
             features: tuple[str, ...] = ()) -> ModelVersion:
    before_torch()
    import torch

    from headrace.trainers.backends.torch_nn import TorchModel

    torch.set_num_threads(1)
    model = TorchModel(spec, plan, seed=3)
    first = plan.outputs[0]
    manifest = Manifest(name=name, framework=Framework.TORCH, task=spec.task,
                        features=features, label="y", classes=first.classes,
                        inputs=export_signature(plan, Framework.TORCH), outputs=plan.outputs,
                        family=plan.family, model_format=MODEL_FORMATS[Framework.TORCH])
    mv = publish(root, manifest, model.export)
    set_alias(root, name, mv.version)
    return mv


def _plan(family: str, inputs: tuple[ModelInput, ...], outputs: tuple[ModelOutput, ...],
          stats: dict[str, InputStats]) -> ModelPlan:
    n_out = len(outputs[0].classes) or 1
    return ModelPlan(family, inputs, outputs, n_out, stats)


def pt_digits(root: Path, name: str) -> ModelVersion:
    plan = _plan("cnn", (IMAGE,), default_outputs(Task.CLASSIFIER, DIGITS), {})
    return _publish(root, name, plan, ModelSpec(model="cnn", filters=(4,), hidden=(8,)))


def pt_tensor(root: Path, name: str) -> ModelVersion:
    stats = {"grid": InputStats(np.array([0.1], np.float32), np.array([2.0], np.float32))}
    plan = _plan("mlp", (GRID,), default_outputs(Task.CLASSIFIER, ("no", "yes")), stats)
    return _publish(root, name, plan, ModelSpec(hidden=(8,)))


def pt_text(root: Path, name: str) -> ModelVersion:
    stats = {"text": InputStats(vocabulary=VOCAB)}
    plan = _plan("text", (TEXT,), default_outputs(Task.CLASSIFIER, ("neg", "neutral", "pos")),
                 stats)
    return _publish(root, name, plan, ModelSpec(model="text", embedding_dim=4, hidden=(8,)))


def pt_tabular(root: Path, name: str, features: tuple[str, ...] = ("a", "b", "c", "d")
               ) -> ModelVersion:
    """A regressor (label units: a target scale inside) on the tabular fast path."""
    stats = {"features": InputStats(np.full(len(features), 0.5, np.float32),
                                    np.full(len(features), 2.0, np.float32))}
    plan = ModelPlan("mlp", tabular_inputs(features), default_outputs(Task.REGRESSOR, ()), 1,
                     stats, target=(10.0, 3.0))
    return _publish(root, name, plan, ModelSpec(task="regressor", hidden=(8,)),
                    features=features)
