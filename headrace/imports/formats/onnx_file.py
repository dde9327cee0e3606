"""ONNX files from any producer: the graph served as it is on ONNX Runtime (ZipMap and label
outputs reduced to the score tensors, ``onnx_graph``)."""

from __future__ import annotations

from pathlib import Path

from headrace.core.errors import ValidationFailed
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.onnx_graph import served_graph
from headrace.imports.sources import ImportSource

NAME = "onnx"
SUFFIXES = (".onnx",)


def claims(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    import onnx

    try:
        model = onnx.load(str(source.path))
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx raises DecodeError, ValidationError, ... for bad files
        raise ValidationFailed(f"{source.uri} is not a valid ONNX model: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    return served_graph(model, declared, into=into, record={"format": NAME})
