"""MXNet Gluon backend. Export layout: ``model-symbol.json`` + ``model-0000.params`` from
``HybridBlock.export("model")`` (inputs ``data`` or ``data0..``: :mod:`.gluon_families`), plus
``vocabulary-<input>.json`` for each category or text input; a classifier's export ends in
softmax (probabilities)."""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy

numpy.bool = bool  # type: ignore[attr-defined]  # MXNet 1.9 still uses the removed alias

with warnings.catch_warnings():  # MXNet 1.9's import-time NumPy deprecation noise
    warnings.simplefilter("ignore", FutureWarning)  # scoped to this import
    warnings.simplefilter("ignore", DeprecationWarning)  # (scipy.sparse via mxnet too)
    import mxnet as mx
    from mxnet import autograd, gluon
import numpy as np  # noqa: E402

from headrace.codecs import codec  # noqa: E402
from headrace.contracts import CodeRef, Framework, ModelSpec, Task  # noqa: E402
from headrace.core.errors import PermanentError  # noqa: E402
from headrace.store import tokens  # noqa: E402
from headrace.store.signature import ModelInput, tabular_inputs  # noqa: E402
from headrace.trainers.backends.base import PREDICT_BATCH  # noqa: E402
from headrace.trainers.backends.gluon_families import (  # noqa: E402
    FAMILIES,
    Builder,
    Net,
    input_names,
)
from headrace.trainers.code_loading import CodeLoadError, resolve_builder  # noqa: E402
from headrace.trainers.inputs import (  # noqa: E402
    Inputs,
    ModelPlan,
    as_inputs,
    host_arrays,
    tabular_plan,
    vocabulary_file,
)

EXPORT_PREFIX = "model"
SYMBOL_FILE = "model-symbol.json"
PARAMS_FILE = "model-0000.params"


def _context() -> Any:
    return mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()


def _dummy(plan: ModelPlan, ctx: Any) -> list[Any]:
    return [mx.nd.zeros((2, *codec(i.kind).mxnet_feed_shape(i)), ctx=ctx) for i in plan.inputs]


class GluonModel:
    def __init__(self, spec: ModelSpec, plan: ModelPlan, seed: int,
                 family: str | Builder | None = None) -> None:
        mx.random.seed(seed)
        np.random.seed(seed)
        self.ctx = _context()
        self.device = "gpu" if self.ctx.device_type == "gpu" else "cpu"
        self.task = spec.task
        self.plan = plan
        build = family or plan.family
        body = (FAMILIES[build] if isinstance(build, str) else build)(spec, plan)
        self.net = Net(plan, body, softmax=False)
        self.net.initialize(mx.init.Xavier(), ctx=self.ctx)
        self.net(*_dummy(plan, self.ctx))  # infer shapes
        if plan.init_weights is not None:
            _load_initial(body, plan.init_weights, self.ctx)
        self.net.hybridize()
        self.loss_fn = (gluon.loss.SoftmaxCrossEntropyLoss() if spec.task == Task.CLASSIFIER
                        else gluon.loss.L2Loss())
        trainable = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
        self.trainer = gluon.Trainer(trainable, "adam", {"learning_rate": spec.learning_rate})

    def nd(self, x: Inputs | np.ndarray) -> list[Any]:
        return [mx.nd.array(a, ctx=self.ctx, dtype="float32") for a in host_arrays(x, self.plan)]

    def recorded_loss(self, x: Inputs | np.ndarray, y: np.ndarray,
                      reduce: Callable[[Any], Any] | None = None) -> Any:
        """The per-example loss of the batch (``reduce``d, if given), recorded for backward."""
        xs = self.nd(x)
        yb = mx.nd.array(y, ctx=self.ctx, dtype="float32")
        with autograd.record():
            out = self.net(*xs)
            if self.task == Task.REGRESSOR:
                out = out.reshape((-1,))
            loss = self.loss_fn(out, yb)
            return loss if reduce is None else reduce(loss)

    def fit_batch(self, x: Inputs | np.ndarray, y: np.ndarray) -> float:
        loss = self.recorded_loss(x, y)
        loss.backward()
        self.trainer.step(len(y))
        return self.reported(float(loss.mean().asscalar()))

    def reported(self, loss: float) -> float:
        """The mean loss as the metrics report it: MSE for a regressor (L2Loss is MSE/2)."""
        return loss * 2 if self.task == Task.REGRESSOR else loss

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        outs = []
        for i in range(0, len(inp), PREDICT_BATCH):
            out = self.net(*self.nd(inp[i:i + PREDICT_BATCH]))
            if self.task == Task.CLASSIFIER:
                out = mx.nd.softmax(out, axis=-1)
            outs.append(out.asnumpy())
        return (np.concatenate(outs).astype(np.float32) if outs
                else np.zeros((0, 1), np.float32))

    def set_learning_rate(self, rate: float) -> None:
        self.trainer.set_learning_rate(rate)

    def parameter_count(self) -> int:
        return int(sum(p.data().size for p in self.net.collect_params().values()
                       if p.grad_req != "null"))

    def save_checkpoint(self, path: Path) -> None:
        # Serialised in memory and written by Python, so a full disk is an OSError with its
        # errno (MXNet's own file writer reports only "FileStream.Write incomplete").
        arrays = {k: v.data().asnumpy()
                  for k, v in self.net._collect_params_with_prefix().items()}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        _write(path / "body.npz", buf.getvalue())
        if getattr(self.trainer, "_update_on_kvstore", False):
            self.trainer.save_states(str(path / "trainer.states"))
        else:
            if not self.trainer._kv_initialized:
                self.trainer._init_kvstore()
            # With the optimizer: its update counts drive Adam's bias correction, so a
            # resume without them is not the run it resumes.
            _write(path / "trainer.states",
                   self.trainer._updaters[0].get_states(dump_optimizer=True))

    def load_checkpoint(self, path: Path) -> None:
        with np.load(path / "body.npz") as data:
            params = self.net._collect_params_with_prefix()
            for k, p in params.items():
                p.set_data(mx.nd.array(data[k], ctx=self.ctx))
        self.trainer.load_states(str(path / "trainer.states"))

    def export(self, path: Path) -> None:
        # The exported graph ends in softmax; training keeps logits (the loss applies it).
        self.net.softmax = self.task == Task.CLASSIFIER
        try:
            self.net.hybridize()  # drops the cached graph
            self.net(*_dummy(self.plan, self.ctx))
            self.net.export(str(path / EXPORT_PREFIX), epoch=0)
        finally:
            self.net.softmax = False
            self.net.hybridize()
        for inp in self.plan.inputs:
            if codec(inp.kind).vocabulary:
                tokens.write_vocabulary(path / vocabulary_file(inp.name),
                                        self.plan.stats[inp.name].vocabulary)


def _load_initial(body: gluon.HybridBlock, path: Path, ctx: Any) -> None:
    """Initial weights: a ``.params`` file (Gluon ``save_parameters``) or an ``.npz`` of
    arrays by parameter name; parameters missing from the file keep their random init."""
    try:
        if path.suffix == ".params":
            body.load_parameters(str(path), ctx=ctx, allow_missing=True, ignore_extra=True)
            return
        params = body._collect_params_with_prefix()
        with np.load(path) as data:
            # A job's checkpoint (body.npz) names the body's parameters "body.<name>".
            names = {k.removeprefix("body."): k for k in data.files}
            for k, p in params.items():
                if k in names and data[names[k]].shape == p.shape:
                    p.set_data(mx.nd.array(data[names[k]], ctx=ctx))
    except (mx.base.MXNetError, OSError, ValueError, KeyError) as exc:
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PermanentError(f"initial weights {path.name} do not load: {line}") from None


def _from_code(spec: ModelSpec, n_outputs: int) -> gluon.HybridBlock:
    """The user's ``build`` (raw scores; softmax is added at export for a classifier)."""
    code = resolve_builder(spec)
    block = code.call("build()", code.build, code.spec_for(spec, n_outputs), code.inputs)
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
    def __init__(self, path: Path, signature: tuple[ModelInput, ...], task: Task) -> None:
        self.ctx = _context()
        self.plan = ModelPlan("?", signature, (), 0)
        self.vocabularies = {i.name: tokens.read_vocabulary(path / i.vocabulary)
                             for i in signature if i.vocabulary}
        with warnings.catch_warnings():  # "Cannot decide type" for every exported graph
            warnings.filterwarnings("ignore", category=UserWarning, module="mxnet")
            self.block = gluon.SymbolBlock.imports(
                str(path / SYMBOL_FILE), input_names(self.plan), str(path / PARAMS_FILE),
                ctx=self.ctx)

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        outs = []
        for i in range(0, len(inp), PREDICT_BATCH):
            arrays = host_arrays(inp[i:i + PREDICT_BATCH], self.plan, self.vocabularies)
            outs.append(self.block(*[mx.nd.array(a, ctx=self.ctx) for a in arrays]).asnumpy())
        return (np.concatenate(outs).astype(np.float32) if outs
                else np.zeros((0, 1), np.float32))


class GluonBackend:
    framework = Framework.MXNET

    def device(self) -> str:
        return "gpu" if mx.context.num_gpus() > 0 else "cpu"

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int,
               plan: ModelPlan | None = None) -> GluonModel:
        plan = plan or tabular_plan(n_features, n_outputs)
        if isinstance(spec.model, CodeRef):  # user code: a body like a family's
            return GluonModel(spec, plan, seed,
                              family=lambda s, p: _from_code(s, p.n_outputs))
        return GluonModel(spec, plan, seed)

    def load_exported(self, path: Path, *, task: Task, n_features: int,
                      signature: tuple[ModelInput, ...] = ()) -> SymbolPredictor:
        sig = signature or tabular_inputs(tuple(f"f{i}" for i in range(n_features)))
        return SymbolPredictor(path, sig, task)


BACKEND = GluonBackend()
