"""Keras 3 ``.keras`` files, served as they are by the scorer's Keras adapters (TensorFlow by
default; JAX or torch by the scorer's runtime), like Headrace's own TensorFlow versions."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.core.types import Framework
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.signature import Seen, check_declared, map_input, outputs_for
from headrace.imports.sources import ImportSource
from headrace.scorers.adapters import keras_backend

NAME = "keras"
SUFFIXES = (".keras",)


def claims(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES and zipfile.is_zipfile(path)


def _element(dtype: str) -> str:
    if "float" in dtype:
        return "float"
    if "int" in dtype or "bool" in dtype:
        return "int"
    return "string" if "string" in dtype else dtype


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    keras_backend.choose("tensorflow")  # as the scorer's default runtime loads it
    import keras

    try:
        model = keras.saving.load_model(source.path, compile=False)
    except Exception as exc:  # Keras raises ValueError, TypeError, ... for a bad file
        raise ValidationFailed(f"{source.uri} is not a Keras model Headrace can load: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    tensors = list(getattr(model, "inputs", None) or ())
    if not tensors:
        raise ValidationFailed(f"{source.uri}: the Keras model states no inputs (a subclassed "
                               f"model): save a functional or Sequential model")
    names = [str(t.name).split(":")[0] for t in tensors]
    check_declared(declared, names)
    inputs = tuple(map_input(Seen(n, _element(str(t.dtype)),
                                  tuple(-1 if s is None else int(s) for s in t.shape[1:])),
                             declared) for n, t in zip(names, tensors, strict=True))
    widths = [(str(o.name).split(":")[0] or f"output{i}",
               int(np.prod([s for s in o.shape[1:] if s is not None])) if len(o.shape) > 1
               else 1) for i, o in enumerate(model.outputs)]
    task, classes, outputs = outputs_for(widths, model_classes=(), declared=declared)
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source.path, into / keras_backend.MODEL_FILE)
    return Converted(framework=Framework.TENSORFLOW, model_format="", directory=into,
                     inputs=inputs, outputs=outputs, task=task, classes=classes,
                     record={"format": NAME, "library": f"keras {keras.__version__}"})
