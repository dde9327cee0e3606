"""PyTorch model families behind one registry, and the preprocessing folded into the export.

:class:`Net` is what trains and what ``export`` writes: ``raw inputs -> preprocessing (buffers
in the module) -> body -> softmax``, fed like an MXNet export (each kind's codec's
``mxnet_feed``: float32 host arrays, categories and text as ids from :mod:`headrace.store.tokens`;
each kind's ``torch_forward`` turns them into the body's input). A body builder (``Builder``)
gets the spec and the plan and returns an ``nn.Module`` whose ``forward(*inputs)`` takes the
preprocessed inputs in signature order (numeric standardised ``(n, k)``; tensors standardised;
images NCHW in 0..1; categories one-hot; text token ids ``(n, max_length)``, 0 the padding)
and returns logits of ``plan.n_outputs`` units. A user's ``build(spec, inputs) -> nn.Module``
plugs in the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torchvision
from torch import nn

from headrace.codecs import InputStats, codec
from headrace.codecs import text as text_codec
from headrace.contracts import ModelSpec, Task
from headrace.trainers.inputs import ModelPlan
from headrace.trainers.linear_start import LinearStart

Builder = Callable[[ModelSpec, ModelPlan], nn.Module]
FAMILIES: dict[str, Builder] = {}
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh,
                                                   "sigmoid": nn.Sigmoid}


def register(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        FAMILIES[name] = fn
        return fn
    return deco


class Net(nn.Module):
    """Preprocessing + body (+ softmax for a classifier): trained, checkpointed, exported."""

    def __init__(self, plan: ModelPlan, body: nn.Module) -> None:
        super().__init__()
        self.plan = plan
        self.body = body
        self.softmax = False  # the export ends in softmax; training keeps logits
        self.constants: list[tuple[str, ...]] = []
        for n, inp in enumerate(plan.inputs):
            consts = codec(inp.kind).mxnet_constants(inp, self._stats(inp.name))
            for key, value in consts.items():
                self.register_buffer(f"{key}{n}", torch.as_tensor(value, dtype=torch.float32))
            self.constants.append(tuple(consts))
        if plan.target is not None:  # a regressor outputs label units
            self.register_buffer("target", torch.tensor(plan.target, dtype=torch.float32))
        else:
            self.target = None

    def _stats(self, name: str) -> InputStats:
        return self.plan.stats.get(name) or InputStats()

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        feats = []
        for n, (inp, x) in enumerate(zip(self.plan.inputs, xs, strict=True)):
            mine = {key: getattr(self, f"{key}{n}") for key in self.constants[n]}
            feats.append(codec(inp.kind).torch_forward(torch, inp, x, mine,
                                                        self._stats(inp.name)))
        out = self.body(*feats)
        if self.target is not None:
            out = out * self.target[1] + self.target[0]
        return torch.softmax(out, dim=-1) if self.softmax else out


def _head(spec: ModelSpec, n_out: int) -> list[nn.Module]:
    return [*([nn.Dropout(spec.dropout)] if spec.dropout else []), nn.LazyLinear(n_out)]


class _Dense(nn.Module):
    """Flatten and concatenate every input, then dense layers (mlp)."""

    def __init__(self, spec: ModelSpec, n_out: int, start: LinearStart | None = None) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for h in spec.hidden:
            layers += [nn.LazyLinear(h), ACTIVATIONS[spec.activation]()]
            if spec.dropout:
                layers.append(nn.Dropout(spec.dropout))
        last = (nn.LazyLinear(n_out) if start is None else
                nn.Linear(spec.hidden[-1] if spec.hidden else start.weights.shape[0], n_out))
        self.net = nn.Sequential(*layers, last)
        # A regressor adds a linear term of its inputs (as the Keras family does); a tabular
        # one starts from the training split's ridge solution with the deep part at zero.
        self.linear: nn.Module | None = None
        if start is not None:
            self.linear = nn.Linear(start.weights.shape[0], start.weights.shape[1])
            with torch.no_grad():
                self.linear.weight.copy_(torch.from_numpy(start.weights.T.copy()))
                self.linear.bias.copy_(torch.from_numpy(start.bias.copy()))
                last.weight.zero_()
                last.bias.zero_()
        elif spec.task == Task.REGRESSOR:
            self.linear = nn.LazyLinear(n_out)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x.flatten(1) for x in xs], dim=1)
        out = self.net(x)
        return out if self.linear is None else out + self.linear(x)


@register("mlp")
def mlp(spec: ModelSpec, plan: ModelPlan) -> nn.Module:
    return _Dense(spec, plan.n_outputs, plan.linear_start)


def _spatial(plan: ModelPlan) -> tuple[int, int]:
    shape = plan.inputs[0].row_shape
    return int(shape[0]), int(shape[1])


@register("cnn")
def cnn(spec: ModelSpec, plan: ModelPlan) -> nn.Module:
    h, w = _spatial(plan)
    layers: list[nn.Module] = []
    for f in spec.filters:
        layers += [nn.LazyConv2d(f, 3, padding=1), nn.ReLU()]
        if min(h, w) >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
    while h * w > 16 and min(h, w) >= 2:  # coarse layout kept: pool to <= 4x4, flatten
        layers.append(nn.MaxPool2d(2))
        h, w = h // 2, w // 2
    layers += [nn.Flatten(), nn.LazyLinear(spec.hidden[0]), nn.ReLU(),
               *_head(spec, plan.n_outputs)]
    return nn.Sequential(*layers)


def _depthwise_separable(c_in: int, c_out: int, stride: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in),
            nn.ReLU(inplace=True), nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True)]


def mobilenet_v1_features() -> nn.Sequential:
    """MobileNet (v1, width 1.0) without its top: torchvision has v2 and v3 only."""
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                               nn.ReLU(inplace=True)]
    c = 32
    for out, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                        *[(512, 1)] * 5, (1024, 2), (1024, 1)):
        layers += _depthwise_separable(c, out, stride)
        c = out
    return nn.Sequential(*layers)


def _backbone(name: str) -> nn.Module:
    """The architecture's convolutional body (``weights=None``), top removed."""
    if name == "mobilenet":
        return mobilenet_v1_features()
    if name == "resnet50":
        net = torchvision.models.resnet50(weights=None)
        return nn.Sequential(*list(net.children())[:-2])
    model = {"mobilenet_v2": torchvision.models.mobilenet_v2,
             "vgg16": torchvision.models.vgg16}[name](weights=None)
    features: nn.Module = model.features
    return features


def _first_conv_takes(net: nn.Module, channels: int) -> None:
    """The architecture's first convolution made to take ``channels`` (e.g. grey images)."""
    for parent in net.modules():
        for key, child in parent.named_children():
            if isinstance(child, nn.Conv2d):
                if child.in_channels != channels:
                    k, s, p = child.kernel_size, child.stride, child.padding
                    setattr(parent, key, nn.Conv2d(
                        channels, child.out_channels, (k[0], k[1]), (s[0], s[1]),
                        p if isinstance(p, str) else (p[0], p[1]), bias=child.bias is not None))
                return


class _Application(nn.Module):
    """An image-zoo body, global average pooling and a dense head (Keras' ``include_top=False,
    pooling="avg"`` with the trainer's head)."""

    def __init__(self, name: str, spec: ModelSpec, plan: ModelPlan) -> None:
        super().__init__()
        self.features = _backbone(name)
        shape = plan.inputs[0].row_shape
        _first_conv_takes(self.features, int(shape[2]) if len(shape) == 3 else 1)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  *_head(spec, plan.n_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _application(name: str) -> Builder:
    def body(spec: ModelSpec, plan: ModelPlan) -> nn.Module:
        return _Application(name, spec, plan)
    return body


for _name in ("mobilenet_v2", "resnet50", "mobilenet", "vgg16"):
    register(_name)(_application(_name))


class _Text(nn.Module):
    """Wide and deep over the codec's token and hashed-bigram ids (0 the padding), as the Keras
    and Gluon families: per-id logits averaged and scaled (a linear model of the n-grams) plus
    a deep part: the mean embedding of every id beside a convolution over the tokens' embeddings
    (``CONV_WIDTH`` tokens a window, max over positions), through a dense layer."""

    def __init__(self, spec: ModelSpec, rows: int, n_out: int, length: int,
                 start: LinearStart | None = None) -> None:
        super().__init__()
        d = spec.embedding_dim
        self.length = length
        self.embed = nn.Embedding(rows, d)
        nn.init.uniform_(self.embed.weight, -text_codec.EMBEDDING_INIT, text_codec.EMBEDDING_INIT)
        filters = text_codec.conv_filters(d)
        self.conv = nn.Conv1d(d, filters, text_codec.CONV_WIDTH,
                              padding=text_codec.CONV_WIDTH // 2)
        dense = nn.Linear(d + filters, spec.hidden[0])
        self.hidden = nn.Sequential(dense, ACTIVATIONS[spec.activation]())
        head = _head(spec, n_out)
        head[-1] = last = nn.Linear(spec.hidden[0], n_out)
        self.out = nn.Sequential(*head)
        self.wide = nn.Embedding(rows, n_out)
        nn.init.zeros_(self.wide.weight)
        for layer in (self.conv, dense, last):  # Keras' and Gluon's Glorot start
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        if start is not None:  # the n-gram logistic regression, the deep part at zero
            with torch.no_grad():
                self.wide.weight.copy_(torch.from_numpy(start.weights))
                last.weight.zero_()
                last.bias.copy_(torch.from_numpy(start.bias.copy()))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids > 0).unsqueeze(2).float()
        count = mask.sum(1).clamp(min=1.0)
        emb = self.embed(ids)
        mean = (emb * mask).sum(1) / count
        conv = torch.relu(self.conv(emb[:, :self.length].transpose(1, 2))).amax(2)
        deep = self.out(self.hidden(torch.cat([mean, conv], dim=1)))
        wide = (self.wide(ids) * mask).sum(1) / count
        return deep + text_codec.WIDE_SCALE * wide


@register("text")
def text(spec: ModelSpec, plan: ModelPlan) -> nn.Module:
    inp = plan.inputs[0]
    rows = text_codec.id_count(inp, len(plan.stats[inp.name].vocabulary))
    return _Text(spec, rows, plan.n_outputs, text_codec.token_count(inp), plan.linear_start)


def dummy_inputs(plan: ModelPlan, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Zeros shaped as the export's inputs (lazy layers infer their widths from them)."""
    return tuple(torch.zeros((batch, *codec(i.kind).mxnet_feed_shape(i))) for i in plan.inputs)
