"""LightGBM boosters in their own text format (``Booster.save_model``: ``.txt``), converted to
ONNX by onnxmltools and served on ONNX Runtime (``boosters``)."""

from __future__ import annotations

from pathlib import Path

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

    def predict(x: np.ndarray) -> np.ndarray:
        raw = booster.predict(x)
        return boosters.scores(raw, k) if classifier else np.asarray(raw, np.float32
                                                                     ).reshape(len(x), -1)

    return boosters.converted(onx, source=source, into=into, declared=declared, names=names,
                              classes=classes, predict=predict,
                              record={"format": NAME, "objective": objective,
                                      "trees": booster.num_trees(),
                                      "converter": f"onnxmltools {onnxmltools.__version__}",
                                      "library": f"lightgbm {lightgbm.__version__}"})
