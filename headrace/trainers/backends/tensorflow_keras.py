"""TensorFlow / Keras 3 backend. Export layout: ``model.keras`` in the version directory."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from headrace.streams.contracts import Framework, ModelSpec, Task
from headrace.trainers.backends.base import batched

MODEL_FILE = "model.keras"
CHECKPOINT_FILE = "model.keras"


class KerasModel:
    def __init__(self, model: keras.Model, device: str) -> None:
        self.model = model
        self.device = device
        self._call = tf.function(lambda x: self.model(x, training=False), reduce_retracing=True)

    def fit_batch(self, x: np.ndarray, y: np.ndarray) -> float:
        out = self.model.train_on_batch(x, y, return_dict=True)
        return float(out["loss"])

    def predict(self, x: np.ndarray) -> np.ndarray:
        return batched(lambda b: self._call(tf.convert_to_tensor(b)).numpy(), x)

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

    def load_exported(self, path: Path, *, task: Task, n_features: int) -> KerasModel:
        return KerasModel(keras.models.load_model(path / MODEL_FILE, compile=False),
                          self.device())


BACKEND = KerasBackend()
