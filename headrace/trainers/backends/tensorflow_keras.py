"""TensorFlow / Keras 3 backend. Export layout: ``model.keras`` in the version directory."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from headrace.streams.contracts import CodeRef, Framework, ModelSpec, Task
from headrace.trainers.backends.base import batched
from headrace.trainers.code_loading import CodeLoadError, resolve_builder

MODEL_FILE = "model.keras"
CHECKPOINT_FILE = "model.keras"


class KerasModel:
    def __init__(self, model: keras.Model, device: str) -> None:
        self.model = model
        self.device = device
        self.adaptable: list[keras.layers.Layer] = []  # preprocessing learned on training rows
        self._call = tf.function(lambda x: self.model(x, training=False), reduce_retracing=True)

    def fit_batch(self, x: np.ndarray, y: np.ndarray) -> float:
        out = self.model.train_on_batch(x, y, return_dict=True)
        return float(out["loss"])

    def predict(self, x: np.ndarray) -> np.ndarray:
        return batched(lambda b: self._call(tf.convert_to_tensor(b)).numpy(), x)

    def parameter_count(self) -> int:
        return int(self.model.count_params())

    def prepare(self, x_train: np.ndarray) -> None:
        """Adapt preprocessing layers on the training rows, in order (before training)."""
        x = tf.convert_to_tensor(x_train)
        for layer in self.adaptable:
            layer.adapt(x)
            x = layer(x)

    def save_checkpoint(self, path: Path) -> None:
        self.model.save(path / CHECKPOINT_FILE)

    def load_checkpoint(self, path: Path) -> None:
        self.model = keras.models.load_model(path / CHECKPOINT_FILE)
        self._call = tf.function(lambda x: self.model(x, training=False), reduce_retracing=True)

    def export(self, path: Path) -> None:
        self.model.save(path / MODEL_FILE)


class KerasBackend:
    framework = Framework.TENSORFLOW

    def device(self) -> str:
        return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int
               ) -> KerasModel:
        keras.utils.set_random_seed(seed)
        if isinstance(spec.model, CodeRef):
            return self._create_from_code(spec, n_features, n_outputs)
        layers: list[keras.layers.Layer] = [keras.Input(shape=(n_features,), dtype="float32")]
        layers += [keras.layers.Dense(h, activation=spec.activation) for h in spec.hidden]
        if spec.task == Task.CLASSIFIER:
            layers.append(keras.layers.Dense(n_outputs, activation="softmax"))
            loss = "sparse_categorical_crossentropy"
        else:
            layers.append(keras.layers.Dense(1))
            loss = "mse"
        model = keras.Sequential(layers)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=spec.learning_rate),
                      loss=loss)
        return KerasModel(model, self.device())

    def _create_from_code(self, spec: ModelSpec, n_features: int, n_outputs: int
                          ) -> KerasModel:
        """The user's ``build`` (raw scores), after its ``preprocess`` layers, plus softmax
        for a classifier: one model, so the export holds all of it."""
        code = resolve_builder(spec)
        bspec = code.spec_for(spec, n_outputs)
        user = code.build(bspec, code.inputs)
        if not isinstance(user, keras.Model):
            raise CodeLoadError(f"entrypoint {code.ref.entrypoint} returned "
                                f"{type(user).__name__}, not a keras.Model")
        pre = list(code.preprocess(bspec, code.inputs)) if code.preprocess else []
        layers = [keras.Input(shape=(n_features,), dtype="float32"), *pre, user]
        if spec.task == Task.CLASSIFIER:
            layers.append(keras.layers.Softmax())
        model = keras.Sequential(layers)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=spec.learning_rate),
                      loss="sparse_categorical_crossentropy" if spec.task == Task.CLASSIFIER
                      else "mse")
        out = KerasModel(model, self.device())
        out.adaptable = [layer for layer in pre if hasattr(layer, "adapt")]
        return out

    def load_exported(self, path: Path, *, task: Task, n_features: int) -> KerasModel:
        return KerasModel(keras.models.load_model(path / MODEL_FILE, compile=False),
                          self.device())


BACKEND = KerasBackend()
