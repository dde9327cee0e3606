"""The registry of model formats: one module per format, each with ``NAME``, ``claims(path)``
(whether a file or folder is of its format, from its suffix and first bytes) and
``convert(source, into, declared)`` (a ``Converted``). A new format is a module and a line here.
Every framework is imported only by its own module, when a model of its format is imported."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from headrace.core.errors import ValidationFailed
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.sources import ImportSource

# Asked in this order: the narrower claims first (a LightGBM model is a .txt file).
FORMATS = {  # name -> module under headrace.imports.formats
    "onnx": "onnx_file",
    "lightgbm": "lightgbm_model",
    "xgboost": "xgboost_model",
    "torch.export": "torch_export",
    "torchscript": "torchscript",
    "keras": "keras_file",
    "sklearn": "sklearn_pickle",
}


class Importer(Protocol):
    NAME: str
    SUFFIXES: tuple[str, ...]

    def claims(self, path: Path) -> bool: ...

    def convert(self, source: ImportSource, into: Path, declared: Declarations) -> Converted: ...


def importer(name: str) -> Importer:
    if name not in FORMATS:
        raise ValidationFailed(f"unknown model format {name!r} (one of {', '.join(FORMATS)})")
    module: Importer = importlib.import_module(f"{__name__}.{FORMATS[name]}")
    return module


def importer_for(source: ImportSource) -> Importer:
    """The importer the source names, else the first whose format the file has."""
    if source.format is not None:
        return importer(source.format)
    for name in FORMATS:
        found = importer(name)
        if found.claims(source.path):
            return found
    known = ", ".join(f"{n} ({' '.join(importer(n).SUFFIXES)})" for n in FORMATS)
    raise ValidationFailed(f"{source.uri}: not a model file Headrace imports ({known})")


def head(path: Path, n: int = 64) -> bytes:
    """The first bytes of a file (b"" for a folder or an unreadable file)."""
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""
