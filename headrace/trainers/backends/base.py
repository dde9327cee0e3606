"""The backend interface: build, train a batch, checkpoint, predict, export, load an export.

Only modules in this package import TensorFlow/Keras or MXNet; everything else gets a
backend from :func:`headrace.trainers.backends.get_backend` and sees numpy arrays
(:class:`headrace.trainers.inputs.Inputs`). Model families live in a registry per framework:
``keras_families.build_keras`` and ``gluon_families.FAMILIES``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import numpy as np

from headrace.contracts import Framework, ModelSpec, Task
from headrace.store.signature import ModelInput
from headrace.trainers.inputs import Inputs, ModelPlan

X = Inputs | np.ndarray  # a bare float matrix is the tabular ``features`` input


class Model(Protocol):
    """One model being trained (or loaded for evaluation)."""

    device: str

    def fit_batch(self, x: X, y: np.ndarray) -> float:
        """One optimiser step; returns the batch loss."""

    def predict(self, x: X) -> np.ndarray:
        """Class probabilities [n, classes] or values [n, 1], float32."""

    def parameter_count(self) -> int:
        """Parameters of the built model (checked against HEADRACE_MAX_PARAMETERS)."""

    def save_checkpoint(self, path: Path) -> None:
        """Weights and optimiser state into the (existing, empty) directory ``path``."""

    def load_checkpoint(self, path: Path) -> None: ...

    def export(self, path: Path) -> None:
        """The serving artefact into ``path`` (the model store's version layout)."""


class Predictor(Protocol):
    def predict(self, x: X) -> np.ndarray: ...


class Backend(Protocol):
    framework: Framework

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int,
               plan: ModelPlan | None = None) -> Model:
        """The model of ``plan`` (None: an MLP over ``n_features`` raw floats)."""

    def load_exported(self, path: Path, *, task: Task, n_features: int,
                      signature: tuple[ModelInput, ...] = ()) -> Predictor:
        """Load what ``export`` wrote (a published version) for evaluation."""

    def device(self) -> str: ...


PREDICT_BATCH = 8192


def batched(fn: object, x: np.ndarray) -> np.ndarray:
    """Apply a batch function over ``x`` in chunks (never per record)."""
    call = fn
    outs = [np.asarray(call(x[i:i + PREDICT_BATCH]))  # type: ignore[operator]
            for i in range(0, len(x), PREDICT_BATCH)]
    return np.concatenate(outs, axis=0).astype(np.float32) if outs else np.zeros((0, 1),
                                                                                  np.float32)


class DistributedModel(Model, Protocol):
    def checksum(self) -> str:
        """A digest of the weights (equal on every worker after a synchronous step)."""


class DistributedRuntime(Protocol):
    """A worker's distributed context (created before the framework runs any op)."""

    def scope(self) -> AbstractContextManager[None]:
        """Build the model inside it."""

    def wrap(self, model: Model) -> DistributedModel:
        """The model trained synchronously with its peers (``fit_batch`` takes the global
        batch; each worker feeds its shard)."""
