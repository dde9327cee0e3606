"""Model inputs as the training loop sees them, and the plan a backend builds a model from.

:class:`Inputs` is a dict of per-input arrays that selects rows like one array
(``x[idx]``, ``x[a:b]``, ``len(x)``), so the training loop draws batches the same way for a
tabular matrix, images or text. Image columns stay encoded until :meth:`Inputs.arrays`
decodes the rows of one batch.

:class:`ModelPlan` is framework-free: the signature (``store.signature.ModelInput``), the
statistics learned on the training split (mean/std, vocabularies) and the family; each
backend turns it into layers that live inside the exported model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from headrace.codecs import InputStats, check_signature, codec, vocabulary_file
from headrace.codecs.numeric import FEATURES
from headrace.contracts import CodeRef, Framework, ModelSpec, Task, families
from headrace.core.errors import PermanentError
from headrace.core.naming import confined
from headrace.store.signature import (
    ModelInput,
    ModelOutput,
    default_outputs,
    tabular_inputs,
)
from headrace.trainers.linear_start import LinearStart, ridge_start
from headrace.trainers.ngram_start import ngram_start

__all__ = [
    "FEATURES",
    "FamilyError",
    "InputStats",
    "Inputs",
    "ModelPlan",
    "as_inputs",
    "check_family",
    "export_signature",
    "host_arrays",
    "inputs_for",
    "learn_stats",
    "plan_for",
    "tabular_plan",
    "vocabulary_file",
]


class FamilyError(PermanentError):
    """The dataset's columns do not suit the model family."""


@dataclass
class Inputs:
    """Named input arrays with the same number of rows."""

    columns: dict[str, np.ndarray]
    signature: tuple[ModelInput, ...]
    _decoded: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, rows: Any) -> Inputs:
        return Inputs({k: v[rows] for k, v in self.columns.items()}, self.signature)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every input as the model takes it raw, by its codec's training decode (images
        decoded; cached on this object)."""
        if self._decoded is None:
            self._decoded = {inp.name: codec(inp.kind).train_decode(inp, self.columns[inp.name])
                             for inp in self.signature}
        return self._decoded


def as_inputs(x: Inputs | np.ndarray) -> Inputs:
    """A bare float matrix is the tabular ``features`` input."""
    if isinstance(x, Inputs):
        return x
    cols = tuple(f"f{i}" for i in range(x.shape[1]))
    return Inputs({FEATURES: np.asarray(x, np.float32)}, tabular_inputs(cols))


@dataclass(frozen=True)
class ModelPlan:
    family: str
    inputs: tuple[ModelInput, ...]
    outputs: tuple[ModelOutput, ...]
    n_outputs: int
    stats: dict[str, InputStats] = field(default_factory=dict)
    init_weights: Path | None = None
    target: tuple[float, float] | None = None  # regressor: (mean, std) of the training labels
    linear_start: LinearStart | None = None  # a tabular regressor's linear term starts here
    # A model the job may publish instead of the trained one (``start_check``): the text
    # family's n-gram logistic regression, as that family's weights (``linear_start`` of a
    # second build), while the network trains from its own initial weights.
    alternative: LinearStart | None = None


def host_arrays(x: Inputs | np.ndarray, plan: ModelPlan,
                vocabularies: dict[str, list[str]] | None = None) -> list[np.ndarray]:
    """An MXNet or torch export's inputs in signature order, contiguous float32, by each kind's
    codec's feed (categories and text as ids, as the scorer's adapters feed them)."""
    arrays = as_inputs(x).arrays()
    out = []
    for inp in plan.inputs:
        c = codec(inp.kind)
        vocab = ((vocabularies or {}).get(inp.name) or list(plan.stats[inp.name].vocabulary)
                 if c.vocabulary else [])
        out.append(np.ascontiguousarray(c.mxnet_feed(inp, arrays[inp.name], vocab),
                                        dtype=np.float32))
    return out


def tabular_plan(n_features: int, n_outputs: int) -> ModelPlan:
    """A plan for a bare float matrix without learned statistics (benchmarks, old callers)."""
    return ModelPlan("mlp", tabular_inputs(tuple(f"f{i}" for i in range(n_features))), (),
                     n_outputs)


def check_family(family: str, signature: tuple[ModelInput, ...]) -> None:
    """One line naming what does not fit: e.g. an image column for ``mlp``. The family table
    says which kinds a family admits; each input's codec says as which kind, and whether it
    can be an image family's input."""
    try:
        fam = families.family(family)
    except ValueError as exc:
        raise FamilyError(str(exc)) from None
    names = ", ".join(f"{i.name} ({i.kind.value})" for i in signature)
    bad = [i for i in signature if codec(i.kind).family_kind not in fam.inputs]
    if not fam.single:
        if bad:
            i = bad[0]
            takes = [f.name for f in families.TABLE.values()
                     if codec(i.kind).family_kind in f.inputs]
            hint = f"; use --model {takes[0]}" if takes else ""
            raise FamilyError(f"model {family} takes {', '.join(sorted(fam.inputs))} columns, "
                              f"not {i.name} ({i.kind.value}){hint}")
        return
    if len(signature) != 1 or bad or (fam.spatial and not codec(signature[0].kind).spatial(
            signature[0])):
        what = ("one image (or 2-D/3-D tensor) column" if fam.spatial else
                f"one {' or '.join(sorted(fam.inputs))} column")
        raise FamilyError(f"model {family} takes {what}; the dataset's inputs are {names}")


def learn_stats(x: Inputs, *, max_tokens: int) -> dict[str, InputStats]:
    """Standardisation and vocabularies from the training rows only (each kind's codec)."""
    return {inp.name: codec(inp.kind).learn(inp, x.columns[inp.name], max_tokens)
            for inp in x.signature}


def plan_for(*, spec: ModelSpec, x_train: Inputs, classes: tuple[str, ...], root: Path,
             y_train: np.ndarray | None = None) -> ModelPlan:
    """The family checked against the inputs, statistics learned on ``x_train``. User code
    (a CodeRef) gets the raw inputs: its own ``preprocess`` learns what it needs."""
    n_out = len(classes) if spec.task == Task.CLASSIFIER else 1
    if isinstance(spec.model, CodeRef):
        raw = tuple(i.model_copy(update={"preprocessing": ()}) for i in x_train.signature)
        return ModelPlan("code", raw, default_outputs(spec.task, classes), n_out)
    check_signature(x_train.signature)
    check_family(spec.model, x_train.signature)
    init: Path | None = None
    if spec.init_weights:
        init = confined(root, spec.init_weights)
        if not init.is_file():
            raise FamilyError(f"initial weights {spec.init_weights!r} do not exist on the DFS")
    target = None
    if spec.task == Task.REGRESSOR and y_train is not None and len(y_train):
        # The model outputs label units: its last layer scales by the training labels' spread.
        std = float(np.std(y_train, dtype=np.float64))
        target = (float(np.mean(y_train, dtype=np.float64)), std if std > 1e-12 else 1.0)
    stats = learn_stats(x_train, max_tokens=spec.max_tokens)
    start = alternative = None
    if y_train is not None and init is None and spec.model == "mlp":
        start = ridge_start(x_train.signature, stats, x_train.columns, y_train, target)
    elif y_train is not None and init is None and spec.task == Task.CLASSIFIER:
        alternative = ngram_start(spec.model, x_train.signature, stats, x_train.columns,
                                  y_train, n_out)
    return ModelPlan(spec.model, x_train.signature, default_outputs(spec.task, classes), n_out,
                     stats, init, target, start, alternative)


def export_signature(plan: ModelPlan, framework: Framework) -> tuple[ModelInput, ...]:
    """The inputs as the manifest states them for ``framework``, as each kind's codec says: the
    vocabulary file its adapter applies (text in every framework, categories in MXNet and
    torch), an MXNet export's images channels first inside; a torch export is fed like MXNet's."""
    if framework not in (Framework.MXNET, Framework.TORCH):
        return tuple(codec(i.kind).keras_export(i) for i in plan.inputs)
    return tuple(codec(i.kind).mxnet_export(i) for i in plan.inputs)


def format_needed(inputs: tuple[ModelInput, ...]) -> int:
    """The manifest format a scorer needs to feed these inputs: the greatest its codecs say."""
    return max(codec(i.kind).format_needed(i) for i in inputs)


def inputs_for(x: Inputs, signature: tuple[ModelInput, ...]) -> Inputs | None:
    """``x`` laid out for another model's signature (production evaluated on this job's rows),
    by each kind's codec; None when ``x`` lacks one of its inputs."""
    have = {i.name: i for i in x.signature}
    cols: dict[str, np.ndarray] = {}
    for want in signature:
        got = have.get(want.name)
        if got is None or got.kind != want.kind:
            return None
        values = codec(want.kind).relayout(got, want, x.columns[want.name])
        if values is None:
            return None
        cols[want.name] = values
    return Inputs(cols, signature)
