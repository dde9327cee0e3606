"""scikit-learn estimators and pipelines, pickled or joblib-dumped, converted to ONNX by
skl2onnx and served on ONNX Runtime. A pickle runs code when it is read: import only files you
trust. An estimator skl2onnx cannot convert is refused in one line naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from headrace.core.errors import ValidationFailed
from headrace.imports.converted import Converted
from headrace.imports.declarations import Declarations
from headrace.imports.onnx_graph import served_graph
from headrace.imports.sources import ImportSource
from headrace.store.signature import InputKind

NAME = "sklearn"
SUFFIXES = (".pkl", ".pickle", ".joblib")


def claims(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES


def _estimators(model: Any) -> list[Any]:
    """The pipeline's steps, the last (the predictor) last; a lone estimator alone."""
    steps = getattr(model, "steps", None)
    if steps is None:
        return [model]
    out: list[Any] = []
    for _, step in steps:
        out.extend(_estimators(step) if hasattr(step, "steps") else [step])
    return out


def _refusal(model: Any, exc: BaseException) -> str:
    import onnx
    import skl2onnx

    said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    said = said.split(" and attributes=")[0][:200]  # not the node's every attribute value
    names = [type(e).__name__ for e in _estimators(model)]
    named = next((n for n in names if n in said), names[-1])
    hist = next((n for n in names if n.startswith("HistGradientBoosting")), None)
    if hist is not None:
        return (f"{hist} does not convert to ONNX with skl2onnx {skl2onnx.__version__} and "
                f"onnx {onnx.__version__} (a known converter fault: {said}); GradientBoosting"
                f"{hist.removeprefix('HistGradientBoosting')}, or a LightGBM or XGBoost model "
                f"file, imports")
    return (f"{named} does not convert to ONNX with skl2onnx {skl2onnx.__version__}: {said}")


def convert(source: ImportSource, into: Path, declared: Declarations) -> Converted:
    import joblib
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    try:
        model = joblib.load(source.path)
    except Exception as exc:  # unpickling raises whatever the pickled code raises
        raise ValidationFailed(f"{source.uri} is not a scikit-learn pickle Headrace can read: "
                               f"{str(exc).strip().splitlines()[0] if str(exc) else exc!r}"
                               ) from None
    if not hasattr(model, "predict") or not hasattr(model, "n_features_in_"):
        raise ValidationFailed(f"{source.uri} holds a {type(model).__name__}, not a fitted "
                               f"scikit-learn estimator or pipeline")
    names = [str(n) for n in getattr(model, "feature_names_in_", ())]
    if names:  # fitted on a DataFrame: one input per column, as skl2onnx converts it
        initial: list[tuple[str, Any]] = []
        for n in names:
            d = declared.input(n)
            strings = d is not None and d.kind in (InputKind.CATEGORY, InputKind.TEXT)
            initial.append((n, StringTensorType([None, 1]) if strings
                            else FloatTensorType([None, 1])))
    else:
        initial = [("X", FloatTensorType([None, int(model.n_features_in_)]))]
    try:
        onx = to_onnx(model, initial_types=initial)
    except Exception as exc:  # skl2onnx raises RuntimeError, TypeError, ... per estimator
        raise ValidationFailed(f"{source.uri}: {_refusal(model, exc)}") from None
    classes = tuple(str(c) for c in getattr(model, "classes_", ()))

    def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
        if names:
            import pandas as pd

            frame = pd.DataFrame({n: np.asarray(inputs[n]).reshape(-1) for n in names})
            x: Any = frame
        else:
            x = np.asarray(inputs["X"], np.float32)
        if classes:
            return np.asarray(model.predict_proba(x), np.float32)
        return np.asarray(model.predict(x), np.float32).reshape(len(x), -1)

    import skl2onnx

    return served_graph(onx, declared, into=into, classes=classes,
                        record={"format": NAME, "estimator": type(model).__name__,
                                "steps": [type(e).__name__ for e in _estimators(model)],
                                "converter": f"skl2onnx {skl2onnx.__version__}"},
                        reference=reference)
