"""Gluon model families behind one registry, and the preprocessing folded into the export.

:class:`Net` is what trains and what ``export`` writes: ``raw inputs -> preprocessing (constants
in the graph) -> body -> softmax``. A body builder (``Builder``) gets the spec and the plan and
returns a ``HybridBlock`` whose ``hybrid_forward(F, *inputs)`` takes the preprocessed inputs in
signature order (numeric standardised ``(n, k)``; tensors standardised; images NCHW in 0..1;
categories one-hot; text token ids ``(n, max_length)``) and returns logits of
``plan.n_outputs`` units. A user's ``build(spec, inputs) -> HybridBlock`` plugs in as
``lambda spec, plan: build(spec, plan.inputs)``.

Export inputs are named ``data`` (one input) or ``data0``, ``data1``, ... in signature order,
all float32: categories and text arrive as ids from :mod:`headrace.store.tokens`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy

numpy.bool = bool  # type: ignore[attr-defined]  # MXNet 1.9 still uses the removed alias

with warnings.catch_warnings():  # MXNet 1.9's import-time NumPy deprecation noise
    warnings.simplefilter("ignore", FutureWarning)  # scoped to this import
    warnings.simplefilter("ignore", DeprecationWarning)  # (scipy.sparse via mxnet too)
    import mxnet as mx
    from mxnet import gluon

from headrace.codecs import InputStats, codec  # noqa: E402
from headrace.codecs import text as text_codec  # noqa: E402
from headrace.contracts import ModelSpec, Task  # noqa: E402
from headrace.trainers.inputs import ModelPlan  # noqa: E402
from headrace.trainers.linear_start import LinearStart  # noqa: E402

Builder = Callable[[ModelSpec, ModelPlan], gluon.HybridBlock]
FAMILIES: dict[str, Builder] = {}
ZOO = {"mobilenet_v2": "mobilenetv2_1.0", "resnet50": "resnet50_v1",
       "mobilenet": "mobilenet1.0", "vgg16": "vgg16"}


def register(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        FAMILIES[name] = fn
        return fn
    return deco


def input_names(plan: ModelPlan) -> list[str]:
    return ["data"] if len(plan.inputs) == 1 else [f"data{i}" for i in range(len(plan.inputs))]


class Net(gluon.HybridBlock):
    """Preprocessing + body (+ softmax for a classifier): trained, checkpointed, exported."""

    def __init__(self, plan: ModelPlan, body: gluon.HybridBlock, *, softmax: bool) -> None:
        super().__init__()
        self.plan = plan
        self.softmax = softmax
        with self.name_scope():
            self.body = body
            if plan.target is not None:  # a regressor outputs label units
                self.target = self.params.get_constant(
                    "target", mx.nd.array([plan.target[0], plan.target[1]]))
            # Each input's constants (e.g. mean{n}, scale{n}) are its kind's codec's.
            self.constants: list[tuple[str, ...]] = []
            for n, inp in enumerate(plan.inputs):
                consts = codec(inp.kind).mxnet_constants(inp, self._stats(inp.name))
                for key, value in consts.items():
                    setattr(self, f"{key}{n}", self.params.get_constant(
                        f"{key}{n}", mx.nd.array(value)))
                self.constants.append(tuple(consts))

    def _stats(self, name: str) -> InputStats:
        return self.plan.stats.get(name) or InputStats()

    def hybrid_forward(self, F: Any, *xs: Any, **consts: Any) -> Any:
        feats = []
        for n, (inp, x) in enumerate(zip(self.plan.inputs, xs, strict=True)):
            mine = {key: consts[f"{key}{n}"] for key in self.constants[n]}
            feats.append(codec(inp.kind).mxnet_forward(F, inp, x, mine, self._stats(inp.name)))
        out = self.body(*feats)
        if "target" in consts:
            t = consts["target"]
            out = F.broadcast_add(F.broadcast_mul(out, F.slice_axis(t, axis=0, begin=1, end=2)),
                                  F.slice_axis(t, axis=0, begin=0, end=1))
        return F.softmax(out, axis=-1) if self.softmax else out


class _Dense(gluon.HybridBlock):
    """Flatten and concatenate every input, then dense layers (mlp); a regressor's output also
    gets a linear term of the inputs (as the Keras mlp's), a tabular one started from the
    training split's ridge solution with the deep part at zero."""

    def __init__(self, spec: ModelSpec, n_out: int, start: LinearStart | None = None) -> None:
        super().__init__()
        with self.name_scope():
            self.net = gluon.nn.HybridSequential()
            for h in spec.hidden:
                self.net.add(gluon.nn.Dense(h, activation=spec.activation))
                if spec.dropout:
                    self.net.add(gluon.nn.Dropout(spec.dropout))
            self.net.add(gluon.nn.Dense(n_out, **({} if start is None else {
                "weight_initializer": "zeros"})))
            self.linear = None
            if start is not None:
                self.linear = gluon.nn.Dense(
                    n_out, in_units=start.weights.shape[0],
                    weight_initializer=mx.init.Constant(mx.nd.array(start.weights.T)),
                    bias_initializer=mx.init.Constant(mx.nd.array(start.bias)))
            elif spec.task == Task.REGRESSOR:
                self.linear = gluon.nn.Dense(n_out)

    def hybrid_forward(self, F: Any, *xs: Any) -> Any:
        x = F.concat(*[F.flatten(v) for v in xs], dim=1) if len(xs) > 1 else F.flatten(xs[0])
        out = self.net(x)
        return out if self.linear is None else out + self.linear(x)


@register("mlp")
def mlp(spec: ModelSpec, plan: ModelPlan) -> gluon.HybridBlock:
    return _Dense(spec, plan.n_outputs, plan.linear_start)


def _spatial(plan: ModelPlan) -> tuple[int, int]:
    shape = plan.inputs[0].row_shape
    return int(shape[0]), int(shape[1])


@register("cnn")
def cnn(spec: ModelSpec, plan: ModelPlan) -> gluon.HybridBlock:
    h, w = _spatial(plan)
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        for f in spec.filters:
            net.add(gluon.nn.Conv2D(f, 3, padding=1, activation="relu"))
            if min(h, w) >= 2:
                net.add(gluon.nn.MaxPool2D(2))
                h, w = h // 2, w // 2
        while h * w > 16 and min(h, w) >= 2:  # coarse layout kept: pool to <= 4x4, flatten
            net.add(gluon.nn.MaxPool2D(2))
            h, w = h // 2, w // 2
        net.add(gluon.nn.Flatten())
        net.add(gluon.nn.Dense(spec.hidden[0], activation="relu"))
        if spec.dropout:
            net.add(gluon.nn.Dropout(spec.dropout))
        net.add(gluon.nn.Dense(plan.n_outputs))
    return net


def _zoo(name: str) -> Builder:
    def body(spec: ModelSpec, plan: ModelPlan) -> gluon.HybridBlock:
        from mxnet.gluon.model_zoo import vision

        net: gluon.HybridBlock = vision.get_model(ZOO[name], pretrained=False,
                                                  classes=plan.n_outputs)
        return net
    return body


for _name in ZOO:
    register(_name)(_zoo(_name))


class _Text(gluon.HybridBlock):
    """Wide and deep, as the Keras text family: the scaled mean of per-id logits over the
    tokens and hashed bigrams, plus the mean embedding of every id (padding left out) beside a
    convolution over the tokens' embeddings (max over positions), through a dense layer."""

    def __init__(self, spec: ModelSpec, vocab: int, n_out: int, length: int,
                 start: LinearStart | None = None) -> None:
        super().__init__()
        self.length = length
        with self.name_scope():
            self.embed = gluon.nn.Embedding(
                vocab, spec.embedding_dim,
                weight_initializer=mx.init.Uniform(text_codec.EMBEDDING_INIT))
            # The convolution as a dense layer over each position's window of embeddings:
            # MXNet 1.9's oneDNN Conv1D output fails a later copy ("to.IsDefaultData()").
            self.conv = gluon.nn.Dense(text_codec.conv_filters(spec.embedding_dim),
                                       activation="relu", flatten=False)
            self.hidden = gluon.nn.Dense(spec.hidden[0], activation=spec.activation)
            self.drop = gluon.nn.Dropout(spec.dropout) if spec.dropout else None
            # The n-gram logistic regression as the start, the deep part at zero.
            self.out = gluon.nn.Dense(n_out) if start is None else gluon.nn.Dense(
                n_out, weight_initializer="zeros",
                bias_initializer=mx.init.Constant(mx.nd.array(start.bias)))
            self.ngram_logits = gluon.nn.Embedding(
                vocab, n_out, weight_initializer="zeros" if start is None else
                mx.init.Constant(mx.nd.array(start.weights)))

    def _windows(self, F: Any, emb: Any) -> Any:
        """``(n, tokens, CONV_WIDTH * dim)``: each token's embedding with its neighbours'
        (zeros past either end: a same-padded convolution's input)."""
        n = self.length
        tokens = F.slice_axis(emb, axis=1, begin=0, end=n)
        zero = F.zeros_like(F.slice_axis(tokens, axis=1, begin=0, end=1))
        shifted = []
        for off in range(-(text_codec.CONV_WIDTH // 2), text_codec.CONV_WIDTH // 2 + 1):
            if off == 0 or abs(off) >= n:
                shifted.append(tokens if off == 0 else F.concat(*[zero] * n, dim=1))
            elif off < 0:  # the token |off| places before
                shifted.append(F.concat(*[zero] * -off,
                                        F.slice_axis(tokens, axis=1, begin=0, end=n + off), dim=1))
            else:
                shifted.append(F.concat(F.slice_axis(tokens, axis=1, begin=off, end=n),
                                        *[zero] * off, dim=1))
        return F.concat(*shifted, dim=2)

    def hybrid_forward(self, F: Any, ids: Any) -> Any:
        mask = F.expand_dims(ids > 0, axis=2)
        count = F.maximum(F.sum(mask, axis=1), 1.0)
        emb = self.embed(ids)
        pooled = F.broadcast_div(F.sum(F.broadcast_mul(emb, mask), axis=1), count)
        conv = F.max(self.conv(self._windows(F, emb)), axis=1)
        x = self.hidden(F.concat(pooled, conv, dim=1))
        if self.drop is not None:
            x = self.drop(x)
        wide = F.broadcast_div(F.sum(F.broadcast_mul(self.ngram_logits(ids), mask), axis=1),
                               count)
        return self.out(x) + wide * text_codec.WIDE_SCALE


@register("text")
def text(spec: ModelSpec, plan: ModelPlan) -> gluon.HybridBlock:
    inp = plan.inputs[0]
    rows = text_codec.id_count(inp, len(plan.stats[inp.name].vocabulary))
    return _Text(spec, rows, plan.n_outputs, text_codec.token_count(inp), plan.linear_start)
