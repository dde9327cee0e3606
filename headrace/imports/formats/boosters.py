"""What the LightGBM and XGBoost importers share: a booster's task from its objective, its
class count, its feature names, and its conversion to ONNX by onnxmltools (served on ONNX
Runtime: measured faster than the boosters' own ``predict`` on the scorer's batches, see
docs/importing.md and bench/bench_imported.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.onnx_graph import served_graph
from headrace.imports.sources import ImportSource

INPUT = "features"


def classes_for(k: int, declared: Declarations, uri: str) -> tuple[str, ...]:
    """A classifier's class names: ``--labels`` (as many as the booster's classes), else the
    class indices the booster was trained on."""
    if declared.labels and len(declared.labels) != k:
        raise ValidationFailed(f"{uri}: --labels names {len(declared.labels)} classes; the "
                               f"booster has {k}")
    return declared.labels or tuple(str(i) for i in range(k))


def scores(raw: np.ndarray, k: int) -> np.ndarray:
    """The booster's ``predict`` as class probabilities (binary: P(1) -> [P(0), P(1)])."""
    y = np.asarray(raw, np.float32)
    if k == 2 and y.ndim == 1:
        return np.stack([1 - y, y], axis=1)
    return y.reshape(len(y), -1)


def converted(onx: Any, *, source: ImportSource, into: Path, declared: Declarations,
              names: Sequence[str], classes: tuple[str, ...],
              predict: Callable[[np.ndarray], np.ndarray], record: dict[str, Any]
              ) -> Converted:
    def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return predict(np.asarray(inputs[INPUT], np.float32))

    return served_graph(onx, declared, into=into, feature_names=names, classes=classes,
                        record=record, reference=reference)


def float_input(n: int) -> list[tuple[str, Any]]:
    from onnxmltools.convert.common.data_types import FloatTensorType

    return [(INPUT, FloatTensorType([None, n]))]


def conversion_failed(what: str, uri: str, exc: BaseException) -> ValidationFailed:
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ValidationFailed(f"{uri}: onnxmltools could not convert this {what}: {said}")
