"""An imported model's inputs and outputs as Headrace's signature (``store.signature``), so
the codecs decode records into what it takes, by name.

What a model says of an input (its name, element type and per-row shape) maps to a kind: a
string column is a ``category``; one number a row is a ``numeric`` input over the record field
of that name; ``k`` numbers a row are ``numeric`` over the model's own feature names when it
has them, else a ``tensor``; a declaration (``--input``) wins. Anything else is refused in one
line naming the input. Outputs: class probabilities (classes from the model, else
``--labels``) or values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from headrace.codecs import check_signature
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.types import Task
from headrace.imports.declarations import Declarations, Declared
from headrace.store.signature import InputKind, ModelInput, ModelOutput, OutputKind


class Unmappable(ValidationFailed):
    """An input or output no codec can feed or read: refused, naming it."""


@dataclass(frozen=True)
class Seen:
    """What a model says of one input: its name, element type and per-row shape (``-1``:
    any size; the batch dimension is not in it)."""

    name: str
    element: str  # "float" | "int" | "string" | another type's name
    shape: tuple[int, ...]


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return cleaned if re.match(r"^[A-Za-z_]", cleaned) else f"x_{cleaned}"


def map_input(seen: Seen, declared: Declarations, *,
              feature_names: Sequence[str] = ()) -> ModelInput:
    """The input as the codecs take it; ``Unmappable`` names it when none can."""
    d = declared.input(seen.name)
    if d is not None:
        return _declared(d, seen)
    where = f"input {seen.name!r} ({seen.element}, per row {list(seen.shape) or 'scalar'})"
    if any(s < 1 for s in seen.shape):
        raise Unmappable(f"{where} has a dimension of any size: declare it with --input "
                         f"{seen.name}:KIND=SPEC")
    name = _safe(seen.name)
    if seen.element == "string" and seen.shape in ((), (1,)):
        return ModelInput(name=name, kind=InputKind.CATEGORY, dtype="string")
    if seen.element not in ("float", "int"):
        raise Unmappable(f"{where}: no codec feeds {seen.element} values")
    if seen.shape in ((), (1,)):
        return ModelInput(name=name, kind=InputKind.NUMERIC, columns=(seen.name,), shape=(1,))
    if len(seen.shape) == 1 and len(feature_names) == seen.shape[0]:
        cols = tuple(feature_names)
        return ModelInput(name=name, kind=InputKind.NUMERIC, columns=cols, shape=(len(cols),))
    return ModelInput(name=name, kind=InputKind.TENSOR, dtype="float32", shape=seen.shape)


def _declared(d: Declared, seen: Seen) -> ModelInput:
    width = 1
    for s in seen.shape:
        width *= s
    try:
        if d.kind == InputKind.NUMERIC:
            if seen.shape and width > 0 and width != len(d.columns):
                raise Unmappable(f"--input {d.name}:numeric names {len(d.columns)} columns; "
                                 f"the model takes {width} values a row")
            inp = ModelInput(name=_safe(d.name), kind=d.kind, columns=d.columns,
                             shape=(len(d.columns),))
        elif d.kind == InputKind.IMAGE:
            shape = d.shape or seen.shape
            if len(shape) != 3:
                raise Unmappable(f"--input {d.name}:image needs HxWxC (the model takes "
                                 f"{list(seen.shape)} a row)")
            inp = ModelInput(name=_safe(d.name), kind=d.kind, height=shape[0], width=shape[1],
                             channels=shape[2])
        elif d.kind in (InputKind.CATEGORY, InputKind.TEXT):
            inp = ModelInput(name=_safe(d.name), kind=d.kind, dtype="string")
        else:
            shape = d.shape or seen.shape
            inp = ModelInput(name=_safe(d.name), kind=d.kind, dtype="float32", shape=shape)
        check_signature([inp])
    except (ValueError, PermanentError) as exc:
        if isinstance(exc, Unmappable):
            raise
        raise Unmappable(f"--input {d.name}:{d.kind}: {str(exc).splitlines()[0]}") from None
    return inp


def check_declared(declared: Declarations, names: Sequence[str]) -> None:
    """Every ``--input`` names one of the model's inputs."""
    unknown = [d.name for d in declared.inputs if d.name not in names]
    if unknown:
        raise Unmappable(f"--input {unknown[0]}: the model has no such input (its inputs: "
                         f"{', '.join(names)})")


def outputs_for(widths: Sequence[tuple[str, int]], *, model_classes: Sequence[str],
                declared: Declarations) -> tuple[Task, tuple[str, ...], tuple[ModelOutput, ...]]:
    """The task, classes and outputs of a model whose outputs have these widths.

    A classifier: the model names its classes (or ``--labels`` does) and has one output of
    that width. Otherwise every output is values."""
    if model_classes and declared.labels and tuple(model_classes) != declared.labels:
        raise ValidationFailed(f"the model names its classes ({', '.join(model_classes)}); "
                               f"--labels is for a model that does not")
    classes = tuple(model_classes) or declared.labels
    if classes:
        if len(widths) != 1 or widths[0][1] != len(classes):
            raise Unmappable(f"{len(classes)} classes, but the model's outputs are "
                             f"{', '.join(f'{n} ({w} wide)' for n, w in widths)}: one output "
                             f"of class scores is needed")
        return Task.CLASSIFIER, classes, (ModelOutput(name=_safe(widths[0][0]),
                                                      kind=OutputKind.CLASSES, classes=classes),)
    return Task.REGRESSOR, (), tuple(ModelOutput(name=_safe(n), kind=OutputKind.VALUES,
                                                 shape=(w,)) for n, w in widths)


def features_of(inputs: Sequence[ModelInput]) -> tuple[str, ...]:
    """The record fields the model reads, in signature order (the manifest's ``features``)."""
    out: list[str] = []
    for inp in inputs:
        out.extend(inp.columns if inp.kind == InputKind.NUMERIC else (inp.name,))
    return tuple(out)
