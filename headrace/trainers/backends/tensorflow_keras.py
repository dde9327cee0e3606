"""TensorFlow / Keras 3 backend. Export layout: ``model.keras`` in the version directory.

The model takes the inputs of the signature (one array for one input, else a dict by input
name); standardisation, rescaling and category vocabularies are layers inside it
(:mod:`.keras_families`). Text is fed as ids its codec makes on the host (``keras_feeder``),
with ``vocabulary-<input>.json`` in the export, as the scorer's adapters feed it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from headrace.codecs import codec, keras_feeder, vocabulary_file
from headrace.codecs.feeds import keras_ids
from headrace.contracts import CodeRef, Framework, ModelSpec, Task
from headrace.store import tokens
from headrace.store.signature import ModelInput
from headrace.trainers.backends.base import PREDICT_BATCH
from headrace.trainers.backends.keras_families import build_keras, builder_from_model
from headrace.trainers.code_loading import CodeLoadError, resolve_builder
from headrace.trainers.inputs import Inputs, ModelPlan, as_inputs, tabular_plan

MODEL_FILE = "model.keras"
CHECKPOINT_FILE = "model.keras"


def _tensor(v: np.ndarray) -> tf.Tensor:
    if v.dtype == object:
        return tf.constant(v.astype(str))
    return tf.convert_to_tensor(v)


Feeders = dict[str, Callable[[np.ndarray], np.ndarray]]


def plan_feeders(plan: ModelPlan) -> Feeders:
    """The host-side encodings of the plan's inputs (text ids with the learned vocabulary)."""
    out: Feeders = {}
    for inp in plan.inputs:
        st = plan.stats.get(inp.name)
        f = keras_feeder(inp, st.vocabulary if st else (), exported=False)
        if f is not None:
            out[inp.name] = f
    return out


def exported_feeders(path: Path, signature: tuple[ModelInput, ...]) -> Feeders:
    """The same for an exported version: the vocabulary files its manifest names."""
    out: Feeders = {}
    for inp in signature:
        f = keras_ids(inp, path)
        if f is not None:
            out[inp.name] = f
    return out


class KerasModel:
    def __init__(self, model: keras.Model, device: str, feeders: Feeders | None = None,
                 vocabularies: dict[str, tuple[str, ...]] | None = None) -> None:
        self.model = model
        self.device = device
        self.feeders = feeders or {}
        self.vocabularies = vocabularies or {}  # written beside the export, by input name
        self.adaptable: list[keras.layers.Layer] = []  # preprocessing learned on training rows
        self.front: keras.Model | None = None  # raw input -> what ``adaptable`` sees
        self._trace()

    def _trace(self) -> None:
        self._call = tf.function(lambda x: self.model(x, training=False), reduce_retracing=True)

    def feed(self, arrays: dict[str, np.ndarray]) -> Any:
        arrays = {k: self.feeders[k](v) if k in self.feeders else v for k, v in arrays.items()}
        if len(arrays) == 1:
            return _tensor(next(iter(arrays.values())))
        return {k: _tensor(v) for k, v in arrays.items()}

    def fit_batch(self, x: Inputs | np.ndarray, y: np.ndarray) -> float:
        out = self.model.train_on_batch(self.feed(as_inputs(x).arrays()), y, return_dict=True)
        return float(out["loss"])

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        outs = [np.asarray(self._call(self.feed(inp[i:i + PREDICT_BATCH].arrays())))
                for i in range(0, len(inp), PREDICT_BATCH)]
        return (np.concatenate(outs).astype(np.float32) if outs
                else np.zeros((0, 1), np.float32))

    def parameter_count(self) -> int:
        return int(self.model.count_params())

    def prepare(self, x_train: Inputs | np.ndarray) -> None:
        """Adapt preprocessing layers on the training rows, in order (before training)."""
        if not self.adaptable:
            return
        (x,) = as_inputs(x_train).arrays().values()  # user code: one input
        x = _tensor(x) if self.front is None else self.front(_tensor(x))
        for layer in self.adaptable:
            layer.adapt(x)
            x = layer(x)

    def save_checkpoint(self, path: Path) -> None:
        self.model.save(path / CHECKPOINT_FILE)

    def load_checkpoint(self, path: Path) -> None:
        self.model = keras.models.load_model(path / CHECKPOINT_FILE)
        self._trace()

    def export(self, path: Path) -> None:
        self.model.save(path / MODEL_FILE)
        for name, vocab in self.vocabularies.items():
            tokens.write_vocabulary(path / vocabulary_file(name), vocab)

    def set_learning_rate(self, rate: float) -> None:
        self.model.optimizer.learning_rate.assign(rate)


def _compile(model: keras.Model, spec: ModelSpec) -> None:
    loss = "sparse_categorical_crossentropy" if spec.task == Task.CLASSIFIER else "mse"
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=spec.learning_rate),
                  loss=loss, jit_compile=False)  # XLA on CPU: minutes per net


class KerasBackend:
    framework = Framework.TENSORFLOW

    def device(self) -> str:
        return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int,
               plan: ModelPlan | None = None) -> KerasModel:
        keras.utils.set_random_seed(seed)
        plan = plan or tabular_plan(n_features, n_outputs)
        if isinstance(spec.model, CodeRef):
            return self._create_from_code(spec, plan)
        model = build_keras(plan.family, spec=spec, plan=plan)
        _compile(model, spec)
        return KerasModel(model, self.device(), plan_feeders(plan), _vocabularies(plan))

    def _create_from_code(self, spec: ModelSpec, plan: ModelPlan) -> KerasModel:
        """The user's ``build`` (raw scores) as a body in the family registry: the inputs'
        own preprocessing (images to 0..1, categories and text to ids), then the user's
        ``preprocess`` layers (one input), the user's model and softmax for a classifier:
        one model, so the export holds all of it, for any input kind."""
        code = resolve_builder(spec)
        bspec = code.spec_for(spec, plan.n_outputs)
        user = code.call("build()", code.build, bspec, code.inputs)
        if not isinstance(user, keras.Model):
            raise CodeLoadError(f"entrypoint {code.ref.entrypoint} returned "
                                f"{type(user).__name__}, not a keras.Model")
        pre = (list(code.call("preprocess()", code.preprocess, bspec, code.inputs))
               if code.preprocess else [])
        if pre and len(plan.inputs) != 1:
            raise CodeLoadError(f"code {code.ref.code}: preprocess layers need a model with "
                                f"one input; this dataset has {len(plan.inputs)}")
        front: list[Any] = []  # the tensor the user's preprocess layers adapt on

        def body(s: ModelSpec, feats: dict[str, Any], p: ModelPlan) -> Any:
            if pre:
                ((name, x),) = feats.items()
                front.append(x)
                for layer in pre:
                    x = layer(x)
                feats = {name: x}
            return builder_from_model(lambda _spec, _feats: user)(s, feats, p)

        model = build_keras(body, spec=spec, plan=plan)
        _compile(model, spec)
        out = KerasModel(model, self.device(), plan_feeders(plan), _vocabularies(plan))
        out.adaptable = [layer for layer in pre if hasattr(layer, "adapt")]
        if out.adaptable and front and front[0] is not model.inputs[0]:
            out.front = keras.Model(model.inputs, front[0])
        return out

    def load_exported(self, path: Path, *, task: Task, n_features: int,
                      signature: tuple[ModelInput, ...] = ()) -> KerasModel:
        return KerasModel(keras.models.load_model(path / MODEL_FILE, compile=False),
                          self.device(), exported_feeders(path, signature))


def _vocabularies(plan: ModelPlan) -> dict[str, tuple[str, ...]]:
    """The vocabulary files a Keras export of ``plan`` ships: those its manifest names."""
    return {i.name: plan.stats[i.name].vocabulary if i.name in plan.stats else ()
            for i in plan.inputs if codec(i.kind).keras_export(i).vocabulary}


BACKEND = KerasBackend()
