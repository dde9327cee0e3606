"""XGBoost boosters in their own formats (``Booster.save_model``: ``.json`` or ``.ubj``),
converted to ONNX by onnxmltools and served on ONNX Runtime (``boosters``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.formats import boosters, head
from headrace.imports.sources import ImportSource

NAME = "xgboost"
SUFFIXES = (".json", ".ubj")
CLASSIFIERS = ("binary:logistic", "multi:softprob", "multi:softmax", "binary:logitraw")


def claims(path: Path) -> bool:
    if not path.is_file():
        return False
    if path.suffix.lower() == ".ubj":
        return True
    return path.suffix.lower() == ".json" and b'"learner"' in head(path, 4096)


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    import onnxmltools
    import xgboost

    try:
        booster = xgboost.Booster(model_file=str(source.path))
    except xgboost.core.XGBoostError as exc:
        raise ValidationFailed(f"{source.uri} is not an XGBoost model: "
                               f"{str(exc).strip().splitlines()[0]}") from None
    learner = json.loads(booster.save_config())["learner"]
    objective = str(learner["objective"]["name"])
    k = max(2, int(learner["learner_model_param"].get("num_class", "0") or 0))
    classifier = objective in CLASSIFIERS
    if objective in ("multi:softmax", "binary:logitraw"):
        raise ValidationFailed(f"{source.uri}: objective {objective} gives no class "
                               f"probabilities; train with multi:softprob or binary:logistic")
    if declared.labels and not classifier:
        raise ValidationFailed(f"{source.uri}: --labels given, but the booster's objective "
                               f"{objective!r} is not a classifier's")
    classes = boosters.classes_for(k, declared, source.uri) if classifier else ()
    n = booster.num_features()
    names = list(booster.feature_names or [f"f{i}" for i in range(n)])
    booster.feature_names = None  # the converter reads split features as f<index>
    try:
        onx = onnxmltools.convert_xgboost(booster, initial_types=boosters.float_input(n))
    except Exception as exc:  # the converter raises what the booster's contents trip
        raise boosters.conversion_failed("XGBoost booster", source.uri, exc) from None

    def predict(x: np.ndarray) -> np.ndarray:
        raw = booster.inplace_predict(x)
        return boosters.scores(raw, k) if classifier else np.asarray(raw, np.float32
                                                                     ).reshape(len(x), -1)

    return boosters.converted(onx, source=source, into=into, declared=declared, names=names,
                              classes=classes, predict=predict,
                              record={"format": NAME, "objective": objective,
                                      "rounds": booster.num_boosted_rounds(),
                                      "converter": f"onnxmltools {onnxmltools.__version__}",
                                      "library": f"xgboost {xgboost.__version__}"})
