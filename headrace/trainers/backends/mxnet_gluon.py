"""MXNet Gluon backend. Export layout: ``model-symbol.json`` + ``model-0000.params`` from
``HybridBlock.export("model")``; a classifier's export ends in softmax (probabilities)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy

numpy.bool = bool  # type: ignore[attr-defined]  # MXNet 1.9 still uses the removed alias

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from headrace.streams.contracts import CodeRef, Framework, ModelSpec, Task  # noqa: E402
from headrace.trainers.backends.base import batched  # noqa: E402
from headrace.trainers.code_loading import CodeLoadError, resolve_builder  # noqa: E402

EXPORT_PREFIX = "model"
SYMBOL_FILE = "model-symbol.json"
PARAMS_FILE = "model-0000.params"


def _context() -> Any:
    return mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()


class _Head(gluon.HybridBlock):
    """The trained body plus softmax for a classifier: what scorers load."""

    def __init__(self, body: gluon.HybridBlock, softmax: bool) -> None:
        super().__init__()
        with self.name_scope():
            self.body = body
        self.softmax = softmax

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        out = self.body(x)
        return F.softmax(out, axis=-1) if self.softmax else out


class GluonModel:
    def __init__(self, spec: ModelSpec, n_features: int, n_outputs: int, seed: int) -> None:
        mx.random.seed(seed)
        np.random.seed(seed)
        self.ctx = _context()
        self.device = "gpu" if self.ctx.device_type == "gpu" else "cpu"
        self.task = spec.task
        self.n_features = n_features
        if isinstance(spec.model, CodeRef):
            body = _from_code(spec, n_outputs)
        else:
            body = gluon.nn.HybridSequential()
            with body.name_scope():
                for h in spec.hidden:
                    body.add(gluon.nn.Dense(h, activation=spec.activation, in_units=0))
                body.add(gluon.nn.Dense(n_outputs if spec.task == Task.CLASSIFIER else 1))
        body.initialize(mx.init.Xavier(), ctx=self.ctx)
        body(mx.nd.zeros((1, n_features), ctx=self.ctx))  # infer shapes
        body.hybridize()
        self.body = body
        self.loss_fn = (gluon.loss.SoftmaxCrossEntropyLoss() if spec.task == Task.CLASSIFIER
                        else gluon.loss.L2Loss())
        self.trainer = gluon.Trainer(body.collect_params(), "adam",
                                     {"learning_rate": spec.learning_rate})

    def fit_batch(self, x: np.ndarray, y: np.ndarray) -> float:
        xb = mx.nd.array(x, ctx=self.ctx, dtype="float32")
        yb = mx.nd.array(y, ctx=self.ctx, dtype="float32")
        with autograd.record():
            out = self.body(xb)
            if self.task == Task.REGRESSOR:
                out = out.reshape((-1,))
            loss = self.loss_fn(out, yb)
        loss.backward()
        self.trainer.step(x.shape[0])
        value = float(loss.mean().asscalar())
        return value * 2 if self.task == Task.REGRESSOR else value  # L2Loss is MSE/2

    def _forward(self, x: np.ndarray) -> np.ndarray:
        out = self.body(mx.nd.array(x, ctx=self.ctx, dtype="float32"))
        if self.task == Task.CLASSIFIER:
            out = mx.nd.softmax(out, axis=-1)
        return np.asarray(out.asnumpy())

    def predict(self, x: np.ndarray) -> np.ndarray:
        return batched(self._forward, x)

    def parameter_count(self) -> int:
        return int(sum(p.data().size for p in self.body.collect_params().values()))

    def save_checkpoint(self, path: Path) -> None:
        # Serialised in memory and written by Python, so a full disk is an OSError with its
        # errno (MXNet's own file writer reports only "FileStream.Write incomplete").
        arrays = {k: v.data().asnumpy()
                  for k, v in self.body._collect_params_with_prefix().items()}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        _write(path / "body.npz", buf.getvalue())
        if getattr(self.trainer, "_update_on_kvstore", False):
            self.trainer.save_states(str(path / "trainer.states"))
        else:
            if not self.trainer._kv_initialized:
                self.trainer._init_kvstore()
            _write(path / "trainer.states",
                   self.trainer._updaters[0].get_states(dump_optimizer=False))

    def load_checkpoint(self, path: Path) -> None:
        with np.load(path / "body.npz") as data:
            params = self.body._collect_params_with_prefix()
            for k, p in params.items():
                p.set_data(mx.nd.array(data[k], ctx=self.ctx))
        self.trainer.load_states(str(path / "trainer.states"))

    def export(self, path: Path) -> None:
        head = _Head(self.body, softmax=self.task == Task.CLASSIFIER)
        head.hybridize()
        head(mx.nd.zeros((1, self.n_features), ctx=self.ctx))
        head.export(str(path / EXPORT_PREFIX), epoch=0)


def _from_code(spec: ModelSpec, n_outputs: int) -> gluon.HybridBlock:
    """The user's ``build`` (raw scores; softmax is added at export for a classifier)."""
    code = resolve_builder(spec)
    block = code.build(code.spec_for(spec, n_outputs), code.inputs)
    if not isinstance(block, gluon.HybridBlock):
        raise CodeLoadError(f"entrypoint {code.ref.entrypoint} returned "
                            f"{type(block).__name__}, not a gluon.HybridBlock")
    return block


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class SymbolPredictor:
    def __init__(self, path: Path) -> None:
        self.ctx = _context()
        self.block = gluon.SymbolBlock.imports(str(path / SYMBOL_FILE), ["data"],
                                               str(path / PARAMS_FILE), ctx=self.ctx)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return batched(
            lambda b: self.block(mx.nd.array(b, ctx=self.ctx, dtype="float32")).asnumpy(), x)


class GluonBackend:
    framework = Framework.MXNET

    def device(self) -> str:
        return "gpu" if mx.context.num_gpus() > 0 else "cpu"

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int
               ) -> GluonModel:
        return GluonModel(spec, n_features, n_outputs, seed)

    def load_exported(self, path: Path, *, task: Task, n_features: int) -> SymbolPredictor:
        return SymbolPredictor(path)


BACKEND = GluonBackend()
