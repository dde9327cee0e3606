"""LightGBM boosters in their own text format (``Booster.save_model``: ``.txt``), converted to
ONNX by onnxmltools and served on ONNX Runtime (``boosters``).

LightGBM splits on double thresholds (``x <= t``); the ONNX tree ensemble holds float32 ones,
rounded to nearest, so a float32 input between ``t`` and its rounding took the other branch
(measured: 2 of 112 held-out diabetes rows off by up to 7.1). The scorer decodes numbers as
float32, for which ``x <= t`` is exactly ``x <= t'`` with ``t'`` the largest float32 not above
``t``: each rounded-up threshold is moved down one float32 step (``exact_thresholds``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.formats import boosters, head
from headrace.imports.sources import ImportSource

NAME = "lightgbm"
SUFFIXES = (".txt",)


def claims(path: Path) -> bool:
    return path.is_file() and head(path, 5) == b"tree\n"


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    import lightgbm
    import onnxmltools

    try:
        booster = lightgbm.Booster(model_file=str(source.path))
    except lightgbm.basic.LightGBMError as exc:
        raise ValidationFailed(f"{source.uri} is not a LightGBM model: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    dump = booster.dump_model(num_iteration=-1)
    objective = str(dump.get("objective", "")).split(" ")[0]
    k = int(dump.get("num_class", 1))
    classifier = objective in ("binary", "multiclass", "multiclassova", "cross_entropy")
    k = 2 if objective in ("binary", "cross_entropy") else k
    classes = boosters.classes_for(k, declared, source.uri) if classifier else ()
    if declared.labels and not classifier:
        raise ValidationFailed(f"{source.uri}: --labels given, but the booster's objective "
                               f"{objective!r} is not a classifier's")
    names = list(booster.feature_name())
    try:
        onx = onnxmltools.convert_lightgbm(booster, initial_types=boosters.float_input(
            booster.num_feature()), zipmap=False)
    except Exception as exc:  # the converter raises what the booster's contents trip
        raise boosters.conversion_failed("LightGBM booster", source.uri, exc) from None
    moved = exact_thresholds(onx, booster.model_to_string())

    def predict(x: np.ndarray) -> np.ndarray:
        raw = np.asarray(booster.predict(x))
        return boosters.scores(raw, k) if classifier else np.asarray(raw, np.float32
                                                                     ).reshape(len(x), -1)

    return boosters.converted(onx, source=source, into=into, declared=declared, names=names,
                              classes=classes, predict=predict,
                              record={"format": NAME, "objective": objective,
                                      "trees": booster.num_trees(),
                                      "thresholds_moved_down": moved,
                                      "converter": f"onnxmltools {onnxmltools.__version__}",
                                      "library": f"lightgbm {lightgbm.__version__}"})


def exact_thresholds(onx: Any, model_text: str) -> int:
    """Move each ``BRANCH_LEQ`` threshold that float32 rounded up from the booster's double one
    down to the largest float32 below that double; how many moved. A float32 value that several
    of the booster's thresholds round to, on both sides, is left as it is."""
    doubles: dict[np.float32, set[bool]] = {}
    for line in model_text.splitlines():
        if line.startswith("threshold="):
            for v in line.removeprefix("threshold=").split():
                t = float(v)
                doubles.setdefault(np.float32(t), set()).add(float(np.float32(t)) > t)
    moved = 0
    for node in onx.graph.node:
        if not node.op_type.startswith("TreeEnsemble"):
            continue
        attrs = {a.name: a for a in node.attribute}
        if "nodes_values" not in attrs or "nodes_modes" not in attrs:
            continue
        values = list(attrs["nodes_values"].floats)
        for i, mode in enumerate(attrs["nodes_modes"].strings):
            f = np.float32(values[i])
            if mode == b"BRANCH_LEQ" and doubles.get(f) == {True}:
                values[i] = float(np.nextafter(f, np.float32(-np.inf)))
                moved += 1
        del attrs["nodes_values"].floats[:]
        attrs["nodes_values"].floats.extend(values)
    return moved
