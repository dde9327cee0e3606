"""TensorFlow: ``build(spec, inputs) -> keras.Model`` giving raw scores (logits).

``preprocess`` returns layers put in front of the model and adapted on the training rows:
the standardisation is learned once and exported with the model, so scorers feed raw values.
"""

from __future__ import annotations

from typing import Any

import keras

from . import config


def preprocess(spec: Any, inputs: Any) -> list[keras.layers.Layer]:
    return [keras.layers.Normalization(name="standardize")]


def build(spec: Any, inputs: Any) -> keras.Model:
    (features,) = inputs  # one numeric input: shape (n_features,)
    width = int(spec.hyperparameters.get("width", config.WIDTH))
    x_in = keras.Input(shape=features.shape, name="features")
    x = keras.layers.Dense(width, activation="relu")(x_in)
    h = keras.layers.Dense(width, activation="relu")(x)
    x = keras.layers.Add()([x, h])
    return keras.Model(x_in, keras.layers.Dense(spec.n_outputs)(x), name="tabular_net")
