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

from headrace.contracts import CodeRef, Framework, ModelSpec, Task
from headrace.core.errors import PermanentError
from headrace.core.naming import confined
from headrace.store import tokens
from headrace.store.signature import (
    InputKind,
    ModelInput,
    ModelOutput,
    default_outputs,
    tabular_inputs,
)
from headrace.trainers import images

FEATURES = "features"  # the name of the numeric input (the scorer's tabular matrix)
IMAGE_FAMILIES = ("cnn", "mobilenet_v2", "resnet50", "mobilenet", "vgg16")
APPLICATION_MIN_SIZE = 32  # Keras Applications / Gluon zoo nets need at least 32x32


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
        """Every input as the model takes it raw; images decoded (cached on this object)."""
        if self._decoded is None:
            out = dict(self.columns)
            for inp in self.signature:
                if inp.kind == InputKind.IMAGE:
                    assert inp.height and inp.width and inp.channels
                    out[inp.name] = images.decode(self.columns[inp.name], height=inp.height,
                                                  width=inp.width, channels=inp.channels)
            self._decoded = out
        return self._decoded


def as_inputs(x: Inputs | np.ndarray) -> Inputs:
    """A bare float matrix is the tabular ``features`` input."""
    if isinstance(x, Inputs):
        return x
    cols = tuple(f"f{i}" for i in range(x.shape[1]))
    return Inputs({FEATURES: np.asarray(x, np.float32)}, tabular_inputs(cols))


@dataclass(frozen=True)
class InputStats:
    """Learned on the training split; becomes layers (or constants) inside the model."""

    mean: np.ndarray | None = None  # numeric: per column; tensor: one value
    std: np.ndarray | None = None
    vocabulary: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelPlan:
    family: str
    inputs: tuple[ModelInput, ...]
    outputs: tuple[ModelOutput, ...]
    n_outputs: int
    stats: dict[str, InputStats] = field(default_factory=dict)
    init_weights: Path | None = None
    target: tuple[float, float] | None = None  # regressor: (mean, std) of the training labels

    def input(self, kind: InputKind) -> ModelInput | None:
        return next((i for i in self.inputs if i.kind == kind), None)


def tabular_plan(n_features: int, n_outputs: int) -> ModelPlan:
    """A plan for a bare float matrix without learned statistics (benchmarks, old callers)."""
    return ModelPlan("mlp", tabular_inputs(tuple(f"f{i}" for i in range(n_features))), (),
                     n_outputs)


def check_family(family: str, signature: tuple[ModelInput, ...]) -> None:
    """One line naming what does not fit: e.g. an image column for ``mlp``."""
    kinds = [i.kind for i in signature]
    names = ", ".join(f"{i.name} ({i.kind.value})" for i in signature)
    if family == "mlp":
        bad = [i for i in signature if i.kind in (InputKind.IMAGE, InputKind.TEXT)]
        if bad:
            hint = "cnn" if bad[0].kind == InputKind.IMAGE else "text"
            raise FamilyError(f"model mlp takes numeric, category and tensor columns, not "
                              f"{bad[0].name} ({bad[0].kind.value}); use --model {hint}")
    elif family in IMAGE_FAMILIES:
        ok = len(kinds) == 1 and (kinds[0] == InputKind.IMAGE or (
            kinds[0] == InputKind.TENSOR and len(signature[0].shape) in (2, 3)))
        if not ok:
            raise FamilyError(f"model {family} takes one image (or 2-D/3-D tensor) column; "
                              f"the dataset's inputs are {names}")
    elif family == "text" and kinds != [InputKind.TEXT]:
        raise FamilyError(f"model text takes one text column; the dataset's inputs are {names}")


def learn_stats(x: Inputs, *, max_tokens: int) -> dict[str, InputStats]:
    """Standardisation and vocabularies from the training rows only."""
    out: dict[str, InputStats] = {}
    for inp in x.signature:
        v = x.columns[inp.name]
        if inp.kind == InputKind.NUMERIC:
            mean = v.mean(axis=0, dtype=np.float64)
            std = v.std(axis=0, dtype=np.float64)
            out[inp.name] = InputStats(mean.astype(np.float32),
                                       np.where(std > 1e-12, std, 1.0).astype(np.float32))
        elif inp.kind == InputKind.TENSOR:
            std = float(v.std(dtype=np.float64))
            out[inp.name] = InputStats(np.array([v.mean(dtype=np.float64)], np.float32),
                                       np.array([std if std > 1e-12 else 1.0], np.float32))
        elif inp.kind == InputKind.CATEGORY:
            out[inp.name] = InputStats(vocabulary=tuple(tokens.learn_categories(v)))
        elif inp.kind == InputKind.TEXT:
            out[inp.name] = InputStats(
                vocabulary=tuple(tokens.learn_vocabulary(v, max_tokens=max_tokens)))
    return out


def vocabulary_file(name: str) -> str:
    return f"vocabulary-{name}.json"


def plan_for(*, spec: ModelSpec, x_train: Inputs, classes: tuple[str, ...], root: Path,
             y_train: np.ndarray | None = None) -> ModelPlan:
    """The family checked against the inputs, statistics learned on ``x_train``. User code
    (a CodeRef) gets the raw inputs: its own ``preprocess`` learns what it needs."""
    n_out = len(classes) if spec.task == Task.CLASSIFIER else 1
    if isinstance(spec.model, CodeRef):
        raw = tuple(i.model_copy(update={"preprocessing": ()}) for i in x_train.signature)
        return ModelPlan("code", raw, default_outputs(spec.task, classes), n_out)
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
    return ModelPlan(spec.model, x_train.signature, default_outputs(spec.task, classes), n_out,
                     learn_stats(x_train, max_tokens=spec.max_tokens), init, target)


def export_signature(plan: ModelPlan, framework: Framework) -> tuple[ModelInput, ...]:
    """The inputs as the manifest states them for ``framework``: an MXNet export names the
    vocabulary file its adapter applies, and transposes images to channels first inside."""
    if framework != Framework.MXNET:
        return plan.inputs
    out = []
    for i in plan.inputs:
        if i.kind in (InputKind.CATEGORY, InputKind.TEXT):
            i = i.model_copy(update={"vocabulary": vocabulary_file(i.name)})
        elif i.kind == InputKind.IMAGE:
            i = i.model_copy(update={"preprocessing": (*i.preprocessing, "to_channels_first")})
        out.append(i)
    return tuple(out)


def inputs_for(x: Inputs, signature: tuple[ModelInput, ...]) -> Inputs | None:
    """``x`` laid out for another model's signature (production evaluated on this job's rows):
    its numeric columns picked by name; None when ``x`` lacks one of them."""
    have = {i.name: i for i in x.signature}
    cols: dict[str, np.ndarray] = {}
    for want in signature:
        got = have.get(want.name)
        if got is None or got.kind != want.kind:
            return None
        if want.kind == InputKind.NUMERIC:
            try:
                idx = [got.columns.index(c) for c in want.columns]
            except ValueError:
                return None
            cols[want.name] = x.columns[want.name][:, idx]
        elif got.row_shape != want.row_shape and want.kind != InputKind.IMAGE:
            return None
        else:
            cols[want.name] = x.columns[want.name]
    return Inputs(cols, signature)
