"""Keras model families behind one registry, with the preprocessing that lives inside the model.

:func:`build_keras` makes ``raw inputs -> preprocessing -> body -> softmax``. A body builder
(``Builder``) gets the spec, the *preprocessed* tensors by input name and the plan, and returns
logits of ``plan.n_outputs`` units. The built-in families register here; user code
(``build(spec, inputs) -> keras.Model`` taking the preprocessed tensors by input name and
returning logits) plugs in as ``lambda spec, feats, plan: user_model(feats)`` or through
:func:`builder_from_model`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras

from headrace.codecs import InputStats, codec
from headrace.codecs import text as text_codec
from headrace.contracts import ModelSpec, Task
from headrace.core.errors import PermanentError
from headrace.trainers.inputs import ModelPlan
from headrace.trainers.linear_start import LinearStart

Builder = Callable[[ModelSpec, dict[str, Any], ModelPlan], Any]
FAMILIES: dict[str, Builder] = {}
APPLICATIONS = {"mobilenet_v2": "MobileNetV2", "resnet50": "ResNet50", "mobilenet": "MobileNet",
                "vgg16": "VGG16"}


def register(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        FAMILIES[name] = fn
        return fn
    return deco


def builder_from_model(build: Callable[[ModelSpec, dict[str, Any]], keras.Model]) -> Builder:
    """A user's ``build(spec, inputs) -> keras.Model`` as a body builder."""
    def body(spec: ModelSpec, feats: dict[str, Any], plan: ModelPlan) -> Any:
        model = build(spec, feats)
        return model(feats if len(feats) > 1 else next(iter(feats.values())))
    return body


def build_keras(family: str | Builder, *, spec: ModelSpec, plan: ModelPlan) -> keras.Model:
    """The whole trainable, exportable model for ``plan`` (classifier output: probabilities)."""
    # Each input's Keras input and preprocessing layers are its kind's codec's.
    raw = {i.name: codec(i.kind).keras_input(keras, i) for i in plan.inputs}
    feats = {i.name: codec(i.kind).keras_preprocess(keras, i, raw[i.name],
                                                    plan.stats.get(i.name, InputStats()))
             for i in plan.inputs}
    builder = FAMILIES[family] if isinstance(family, str) else family
    out = builder(spec, feats, plan)
    if spec.task == Task.CLASSIFIER:
        out = keras.layers.Softmax(name="probabilities")(out)
    elif plan.target is not None:
        out = keras.layers.Rescaling(plan.target[1], offset=plan.target[0], name="label_units")(out)
    inputs: Any = raw if len(raw) > 1 else next(iter(raw.values()))
    model = keras.Model(inputs, out, name=f"headrace_{plan.family}")
    if plan.init_weights is not None:
        _load_initial(model, plan.init_weights)
    return model


def _load_initial(model: keras.Model, path: Path) -> None:
    try:
        model.load_weights(path, skip_mismatch=True)
    except (ValueError, OSError, KeyError) as exc:
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PermanentError(f"initial weights {path.name} do not load: {line}") from None


def _head(spec: ModelSpec, x: Any, plan: ModelPlan, start: LinearStart | None = None) -> Any:
    """The logits; zero weights and the start's bias when another part starts as the model."""
    if spec.dropout:
        x = keras.layers.Dropout(spec.dropout)(x)
    init = {} if start is None else {"kernel_initializer": "zeros",
                                     "bias_initializer": keras.initializers.Constant(start.bias)}
    return keras.layers.Dense(plan.n_outputs, name="logits", **init)(x)


@register("mlp")
def mlp(spec: ModelSpec, feats: dict[str, Any], plan: ModelPlan) -> Any:
    parts = [f if len(f.shape) == 2 else keras.layers.Flatten()(f) for f in feats.values()]
    x = inputs = parts[0] if len(parts) == 1 else keras.layers.Concatenate()(parts)
    for h in spec.hidden:
        x = keras.layers.Dense(h, activation=spec.activation)(x)
        if spec.dropout:
            x = keras.layers.Dropout(spec.dropout)(x)
    start = plan.linear_start  # a tabular regressor: ridge's solution, the deep part at zero
    out = keras.layers.Dense(plan.n_outputs, name="logits",
                             **({} if start is None else {"kernel_initializer": "zeros"}))(x)
    if spec.task == Task.REGRESSOR:  # plus a linear term: never worse than ridge for long
        init = {} if start is None else {
            "kernel_initializer": keras.initializers.Constant(start.weights),
            "bias_initializer": keras.initializers.Constant(start.bias)}
        out = keras.layers.Add(name="with_linear")(
            [out, keras.layers.Dense(plan.n_outputs, name="linear", **init)(inputs)])
    return out


def _image(feats: dict[str, Any]) -> Any:
    x = next(iter(feats.values()))
    if len(x.shape) == 3:  # a 2-D tensor column: one channel
        x = keras.layers.Reshape((*x.shape[1:], 1))(x)
    return x


@register("cnn")
def cnn(spec: ModelSpec, feats: dict[str, Any], plan: ModelPlan) -> Any:
    x = _image(feats)
    for f in spec.filters:
        x = keras.layers.Conv2D(f, 3, padding="same", activation="relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = keras.layers.MaxPooling2D(2)(x)
    while x.shape[1] * x.shape[2] > 16 and min(x.shape[1], x.shape[2]) >= 2:
        x = keras.layers.MaxPooling2D(2)(x)  # coarse layout kept: pool to <= 4x4, flatten
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(spec.hidden[0], activation="relu")(x)
    return _head(spec, x, plan)


def _application(name: str) -> Builder:
    def body(spec: ModelSpec, feats: dict[str, Any], plan: ModelPlan) -> Any:
        x = _image(feats)
        app = getattr(keras.applications, APPLICATIONS[name])(
            input_shape=tuple(x.shape[1:]), weights=None, include_top=False, pooling="avg")
        return _head(spec, app(x), plan)
    return body


for _name in APPLICATIONS:
    register(_name)(_application(_name))


@register("text")
def text(spec: ModelSpec, feats: dict[str, Any], plan: ModelPlan) -> Any:
    """Wide and deep over the tokens and their hashed bigrams (the ids the text codec makes,
    padding masked): per-id logits averaged and scaled (a linear model of the n-grams: bigrams
    see "not good" where a bag of words sees "good") plus a deep part: the mean embedding of
    every id beside a convolution over the tokens' embeddings (``CONV_WIDTH`` tokens a window,
    max over positions), through a dense layer. Built-in layers only: the export loads on any
    Keras backend without Headrace."""
    name, ids = next(iter(feats.items()))
    (inp,) = (i for i in plan.inputs if i.name == name)
    rows = text_codec.id_count(inp, len(plan.stats[name].vocabulary))
    init = keras.initializers.RandomUniform(-text_codec.EMBEDDING_INIT, text_codec.EMBEDDING_INIT)
    emb = keras.layers.Embedding(rows, spec.embedding_dim, mask_zero=True,
                                 embeddings_initializer=init, name="embedding")(ids)
    mean = keras.layers.GlobalAveragePooling1D()(emb)
    tokens = text_codec.token_count(inp)
    with warnings.catch_warnings():  # the crop drops the mask on purpose: the convolution
        warnings.simplefilter("ignore", UserWarning)  # sees every position, as in torch/Gluon
        conv = keras.layers.Cropping1D((0, text_codec.width(inp) - tokens),
                                       name="tokens")(emb)
    conv = keras.layers.Conv1D(text_codec.conv_filters(spec.embedding_dim),
                               text_codec.CONV_WIDTH, padding="same", activation="relu",
                               name="conv")(conv)
    conv = keras.layers.GlobalMaxPooling1D()(conv)
    x = keras.layers.Concatenate()([mean, conv])
    x = keras.layers.Dense(spec.hidden[0], activation=spec.activation)(x)
    start = plan.linear_start  # the n-gram logistic regression, the deep part at zero
    deep = _head(spec, x, plan, start)
    logits = keras.layers.Embedding(rows, plan.n_outputs, mask_zero=True,
                                    embeddings_initializer="zeros", name="ngram_logits")
    wide = logits(ids)
    if start is not None:  # set, not an initializer: that would write the table into config
        logits.set_weights([start.weights])
    wide = keras.layers.GlobalAveragePooling1D()(wide)
    # A mean times about a short text's n-grams: the linear part learns at a sum's pace.
    wide = keras.layers.Rescaling(text_codec.WIDE_SCALE, name="ngram_scale")(wide)
    return keras.layers.Add(name="wide_and_deep")([deep, wide])
