"""PyTorch backend. Export layout: ``model.pt2`` (``torch.export``: the graph and its weights,
with no Python class needed to load it, so a code model scores without its package) plus
``vocabulary-<input>.json`` for each category or text input; a classifier's export ends in
softmax. The manifest states the format (``model_format``: ``store.manifest.MODEL_FORMATS``).

The model is fed as an MXNet export is (:mod:`.torch_families`): float32 arrays in signature
order, text and categories as ids by :mod:`headrace.store.tokens`.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from headrace.codecs import codec
from headrace.contracts import CodeRef, Framework, ModelSpec, Task
from headrace.core.errors import PermanentError
from headrace.store import tokens
from headrace.store.signature import ModelInput, tabular_inputs
from headrace.trainers.backends.base import PREDICT_BATCH
from headrace.trainers.backends.torch_families import FAMILIES, Builder, Net, dummy_inputs
from headrace.trainers.code_loading import CodeLoadError, LoadedCode, resolve_builder
from headrace.trainers.inputs import (
    Inputs,
    ModelPlan,
    as_inputs,
    host_arrays,
    tabular_plan,
    vocabulary_file,
)

MODEL_FILE = "model.pt2"
SCRIPT_FILE = "model.ts"  # an imported TorchScript version (headrace models import)
CHECKPOINT_FILE = "state.pt"

if os.environ.get("HEADRACE_THREADS"):  # a gang member's share of the cores (peers.thread_env)
    torch.set_num_threads(int(os.environ["HEADRACE_THREADS"]))


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _tensors(arrays: list[np.ndarray], dev: torch.device) -> list[torch.Tensor]:
    return [torch.from_numpy(a).to(dev) for a in arrays]


class TorchModel:
    def __init__(self, spec: ModelSpec, plan: ModelPlan, seed: int,
                 family: str | Builder | None = None, code: LoadedCode | None = None) -> None:
        torch.manual_seed(seed)
        self.dev = device()
        self.device = self.dev.type if self.dev.type == "cpu" else "gpu"
        self.task = spec.task
        self.plan = plan
        build = family or plan.family
        body = (FAMILIES[build] if isinstance(build, str) else build)(spec, plan)
        self.net = Net(plan, body)
        dummy = dummy_inputs(plan)
        self.net.eval()  # batch norm statistics stay as they are
        with torch.no_grad():  # lazy layers take their widths from a first call
            if code is None:
                self.net(*dummy)
            else:
                code.call("forward()", self.net, *dummy)
        if plan.init_weights is not None:
            _load_initial(body, plan.init_weights)
        self.net.to(self.dev)
        self.loss_fn: nn.Module = (nn.CrossEntropyLoss() if spec.task == Task.CLASSIFIER
                                   else nn.MSELoss())
        self.optimizer = torch.optim.Adam(
            [p for p in self.net.parameters() if p.requires_grad], lr=spec.learning_rate)
        self.learning_rate = spec.learning_rate

    def tensors(self, x: Inputs | np.ndarray) -> list[torch.Tensor]:
        return _tensors(host_arrays(x, self.plan), self.dev)

    def batch_loss(self, x: Inputs | np.ndarray, y: np.ndarray) -> torch.Tensor:
        """The batch's mean loss, with its graph (for ``backward``)."""
        self.net.train()
        out = self.net(*self.tensors(x))
        if self.task == Task.REGRESSOR:
            target = torch.from_numpy(np.asarray(y, np.float32)).to(self.dev)
            return self.loss_fn(out.reshape(-1), target)
        return self.loss_fn(out, torch.from_numpy(np.asarray(y, np.int64)).to(self.dev))

    def fit_batch(self, x: Inputs | np.ndarray, y: np.ndarray) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.batch_loss(x, y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        self.net.eval()
        outs = []
        with torch.inference_mode():
            for i in range(0, len(inp), PREDICT_BATCH):
                out = self.net(*self.tensors(inp[i:i + PREDICT_BATCH]))
                if self.task == Task.CLASSIFIER:
                    out = torch.softmax(out, dim=-1)
                outs.append(out.float().cpu().numpy())
        return (np.concatenate(outs).astype(np.float32) if outs
                else np.zeros((0, 1), np.float32))

    def set_learning_rate(self, rate: float) -> None:
        self.learning_rate = rate
        for group in self.optimizer.param_groups:
            group["lr"] = rate

    def parameter_count(self) -> int:
        return int(sum(p.numel() for p in self.net.parameters() if p.requires_grad))

    def state(self) -> dict[str, Any]:
        """Model, optimizer, learning rate and RNG states: what a bit-exact resume needs (the
        rate schedule itself is replayed from ``history.json``)."""
        return {"model": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "learning_rate": self.learning_rate, "rng": torch.get_rng_state(),
                **({"cuda_rng": torch.cuda.get_rng_state_all()}
                   if torch.cuda.is_available() else {})}

    def load_state(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.set_learning_rate(float(state["learning_rate"]))
        torch.set_rng_state(state["rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    def save_checkpoint(self, path: Path) -> None:
        self.save_state(path / CHECKPOINT_FILE, self.state())

    @staticmethod
    def save_state(file: Path, state: dict[str, Any]) -> None:
        buf = io.BytesIO()  # written by Python: a full disk is an OSError with its errno
        torch.save(state, buf)
        _write(file, buf.getvalue())

    def load_checkpoint(self, path: Path) -> None:
        self.load_state(torch.load(path / CHECKPOINT_FILE, map_location=self.dev,
                                   weights_only=True))

    def export(self, path: Path) -> None:
        export_net(self.net, self.plan, self.task, path / MODEL_FILE)
        for inp in self.plan.inputs:
            if codec(inp.kind).vocabulary:
                tokens.write_vocabulary(path / vocabulary_file(inp.name),
                                        self.plan.stats[inp.name].vocabulary)


def export_net(net: Net, plan: ModelPlan, task: Task, path: Path) -> None:
    """``net`` (softmax on for a classifier) as a ``torch.export`` program, any batch size."""
    net.softmax = task == Task.CLASSIFIER
    net.eval()
    dev = next(net.parameters()).device
    dummy = tuple(t.to(dev) for t in dummy_inputs(plan))
    dynamic = tuple({0: torch.export.Dim.DYNAMIC} for _ in dummy)
    try:
        program = torch.export.export(net, dummy, dynamic_shapes=(dynamic,))  # *xs
    except Exception as exc:  # a graph torch.export cannot capture: the same every attempt
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PermanentError(f"the model does not export with torch.export: "
                             f"{type(exc).__name__}: {line[:300]}") from None
    finally:
        net.softmax = False
        net.train()
    buf = io.BytesIO()
    torch.export.save(program, buf)
    _write(path, buf.getvalue())


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _load_initial(body: nn.Module, path: Path) -> None:
    """Initial weights: a ``.pt`` state dict (or a torch job's checkpoint ``state.pt``) or an
    ``.npz`` of arrays by parameter name; parameters missing from the file, or of another
    shape, keep their random init."""
    try:
        if path.suffix == ".npz":
            with np.load(path) as data:
                arrays = {k: torch.from_numpy(data[k]) for k in data.files}
        elif path.suffix == ".pt":
            loaded = torch.load(path, map_location="cpu", weights_only=True)
            arrays = loaded.get("model", loaded) if isinstance(loaded, dict) else {}
        else:
            raise ValueError(f"a torch model takes .pt or .npz weights, not {path.suffix}")
        # A job's checkpoint names the body's parameters "body.<name>".
        named = {k.removeprefix("body."): v for k, v in arrays.items()}
        own = body.state_dict()
        fits = {k: v for k, v in named.items() if k in own and tuple(v.shape) == own[k].shape}
        body.load_state_dict(fits, strict=False)
    except (OSError, ValueError, KeyError, RuntimeError, AttributeError) as exc:
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PermanentError(f"initial weights {path.name} do not load: {line}") from None


def _from_code(code: LoadedCode, spec: ModelSpec, n_outputs: int) -> nn.Module:
    """The user's ``build`` (raw scores; softmax is added at export for a classifier)."""
    module = code.call("build()", code.build, code.spec_for(spec, n_outputs), code.inputs)
    if not isinstance(module, nn.Module):
        raise CodeLoadError(f"entrypoint {code.ref.entrypoint} returned "
                            f"{type(module).__name__}, not a torch.nn.Module")
    return module


class ExportedPredictor:
    """A published ``model.pt2`` (or an imported TorchScript ``model.ts``) fed as the trainer
    fed it."""

    def __init__(self, path: Path, signature: tuple[ModelInput, ...]) -> None:
        self.dev = device()
        self.plan = ModelPlan("?", signature, (), 0)
        self.vocabularies = {i.name: tokens.read_vocabulary(path / i.vocabulary)
                             for i in signature if i.vocabulary}
        program = path / MODEL_FILE
        self.module = (torch.export.load(program).module() if program.exists() else
                       torch.jit.load(str(path / SCRIPT_FILE), map_location="cpu").eval()
                       ).to(self.dev)

    def predict(self, x: Inputs | np.ndarray) -> np.ndarray:
        inp = as_inputs(x)
        outs = []
        with torch.inference_mode():
            for i in range(0, len(inp), PREDICT_BATCH):
                arrays = host_arrays(inp[i:i + PREDICT_BATCH], self.plan, self.vocabularies)
                outs.append(self.module(*_tensors(arrays, self.dev)).float().cpu().numpy())
        return (np.concatenate(outs).astype(np.float32) if outs
                else np.zeros((0, 1), np.float32))


class TorchBackend:
    framework = Framework.TORCH

    def device(self) -> str:
        return "gpu" if torch.cuda.is_available() else "cpu"

    def create(self, *, spec: ModelSpec, n_features: int, n_outputs: int, seed: int,
               plan: ModelPlan | None = None) -> TorchModel:
        plan = plan or tabular_plan(n_features, n_outputs)
        if isinstance(spec.model, CodeRef):  # user code: a body like a family's
            code = resolve_builder(spec)
            return TorchModel(spec, plan, seed, code=code,
                              family=lambda s, p: _from_code(code, s, p.n_outputs))
        return TorchModel(spec, plan, seed)

    def load_exported(self, path: Path, *, task: Task, n_features: int,
                      signature: tuple[ModelInput, ...] = ()) -> ExportedPredictor:
        sig = signature or tabular_inputs(tuple(f"f{i}" for i in range(n_features)))
        return ExportedPredictor(path, sig)


BACKEND = TorchBackend()
