"""An MLflow model directory's ``MLmodel`` file: the flavor it is imported as and its signature
mapped to Headrace's input kinds, and the file written for the versions Headrace logs.

Flavors read, in order of preference (the first one the directory has): onnx, xgboost,
lightgbm, sklearn, pytorch, keras, and Headrace's own (a version logged by Headrace, the store's
files verbatim). The signature maps by name: a column signature's numeric columns (double,
float, long, integer, boolean) are one ``numeric`` input over those columns in order, a string
column is a ``category`` input; a tensor signature's inputs are ``tensor`` inputs of their
dtype and per-row shape. Anything else is refused in one line naming the input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headrace.core.errors import ValidationFailed
from headrace.store.signature import InputKind, ModelInput

MLMODEL = "MLmodel"
HEADRACE_FLAVOR = "headrace"
# flavor -> the format a file importer knows it by
FLAVORS = {"onnx": "onnx", "xgboost": "xgboost", "lightgbm": "lightgbm", "sklearn": "sklearn",
           "pytorch": "torchscript", "keras": "keras", HEADRACE_FLAVOR: HEADRACE_FLAVOR}
# MLflow 3 saves scikit-learn (and LightGBM's scikit-learn API) models with skops by default:
# such a file is handed on as ``skops`` whatever its flavor, with the types the MLmodel trusts.
SKOPS = "skops"
NUMERIC_COLUMNS = frozenset({"double", "float", "long", "integer", "boolean"})
TENSOR_DTYPES = {"float32": "float32", "float64": "float32", "int64": "int64",
                 "int32": "int64", "uint8": "uint8", "bool": "float32"}


@dataclass(frozen=True)
class MlflowModel:
    flavor: str  # a key of FLAVORS
    format: str  # what the file importer reads: FLAVORS[flavor], or SKOPS
    model_file: Path  # the file (or directory) that flavor keeps the model in
    inputs: tuple[ModelInput, ...]  # empty: the MLmodel states no signature
    labels: tuple[str, ...]  # class labels where the MLmodel's metadata states them
    meta: dict[str, Any]


def read(directory: Path, *, where: str) -> MlflowModel:
    """The model in ``directory`` (downloaded artifacts); ``where`` names it in errors."""
    try:
        doc = yaml.safe_load((directory / MLMODEL).read_text())
    except FileNotFoundError:
        raise ValidationFailed(f"{where} is not an MLflow model (no MLmodel file)") from None
    except yaml.YAMLError as exc:
        raise ValidationFailed(f"{where}: its MLmodel file is not YAML: {exc}") from None
    flavors = doc.get("flavors") if isinstance(doc, dict) else None
    if not isinstance(flavors, dict):
        raise ValidationFailed(f"{where}: its MLmodel file lists no flavors")
    flavor = next((f for f in FLAVORS if f in flavors), None)
    if flavor is None:
        raise ValidationFailed(
            f"{where} has flavors {', '.join(sorted(flavors))}; Headrace imports "
            f"{', '.join(f for f in FLAVORS if f != HEADRACE_FLAVOR)}")
    conf = flavors[flavor] if isinstance(flavors[flavor], dict) else {}
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    labels = tuple(str(c) for c in (meta or {}).get("classes", ()) or ())
    fmt = SKOPS if conf.get("serialization_format") == SKOPS else FLAVORS[flavor]
    return MlflowModel(flavor, fmt, directory / _model_path(flavor, conf),
                       inputs_of(doc.get("signature"), where=where), labels,
                       {**(meta or {}), **_details(conf)})


def _details(conf: dict[str, Any]) -> dict[str, Any]:
    """What the flavor says about its file that a loader needs (the class, the skops types
    the producer trusted)."""
    keep = ("model_class", "model_format", "serialization_format", "skops_trusted_types")
    return {k: conf[k] for k in keep if conf.get(k) is not None}


def _model_path(flavor: str, conf: dict[str, Any]) -> str:
    """Where each flavor keeps its model, as MLflow's own savers write it."""
    if flavor in ("onnx", "xgboost", "lightgbm"):
        return str(conf.get("data", "model"))
    if flavor == "sklearn":
        return str(conf.get("pickled_model", "model.pkl"))
    if flavor == "pytorch":  # mlflow.pytorch: data/model.pth
        return f"{conf.get('model_data', 'data')}/model.pth"
    if flavor == "keras":  # mlflow.keras (Keras 3): data/model.keras
        return f"{conf.get('data', 'data')}/model.keras"
    return str(conf.get("data", "version"))


def _spec(raw: object) -> list[dict[str, Any]]:
    if raw is None:
        return []
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    return [s for s in parsed if isinstance(s, dict)] if isinstance(parsed, list) else []


def inputs_of(signature: object, *, where: str) -> tuple[ModelInput, ...]:
    """The MLflow signature's inputs as Headrace inputs; ValidationFailed naming the first that
    has no codec."""
    if not isinstance(signature, dict):
        return ()
    try:
        specs = _spec(signature.get("inputs"))
    except ValueError as exc:
        raise ValidationFailed(f"{where}: its signature's inputs are not JSON: {exc}") from None
    numeric: list[str] = []
    out: list[ModelInput] = []
    for i, s in enumerate(specs):
        name = str(s.get("name") or f"input_{i}")
        kind = s.get("type")
        if kind in NUMERIC_COLUMNS:
            numeric.append(name)
        elif kind == "string":
            out.append(_input(where, name=name, kind=InputKind.CATEGORY, dtype="string"))
        elif kind == "tensor":
            t = s.get("tensor-spec") or {}
            dtype = TENSOR_DTYPES.get(str(t.get("dtype")))
            shape = tuple(int(d) for d in (t.get("shape") or ())[1:])
            if dtype is None or any(d < 1 for d in shape):
                raise ValidationFailed(
                    f"{where}: input {name!r} is a tensor of {t.get('dtype')} shape "
                    f"{t.get('shape')}: Headrace feeds float32, int64 or uint8 tensors of a "
                    f"fixed per-row shape")
            out.append(_input(where, name=name, kind=InputKind.TENSOR, dtype=dtype,
                              shape=shape or (1,)))
        else:
            raise ValidationFailed(f"{where}: input {name!r} is of type {kind}: no Headrace "
                                   f"codec reads it (numbers, strings and tensors do)")
    if numeric:
        out.insert(0, _input(where, name="features", kind=InputKind.NUMERIC,
                             columns=tuple(numeric), shape=(len(numeric),)))
    return tuple(out)


def _input(where: str, **fields: Any) -> ModelInput:
    try:
        return ModelInput(**fields)
    except ValueError as exc:
        raise ValidationFailed(f"{where}: input {fields.get('name')!r} cannot be a Headrace "
                               f"input: {str(exc).splitlines()[-1].strip()}") from None


def signature_of(inputs: tuple[ModelInput, ...]) -> dict[str, str]:
    """The MLflow signature (as the MLmodel file holds it) of Headrace inputs."""
    specs: list[dict[str, Any]] = []
    for inp in inputs:
        if inp.kind == InputKind.NUMERIC and inp.columns:
            specs += [{"type": "double", "name": c, "required": True} for c in inp.columns]
        elif inp.kind in (InputKind.CATEGORY, InputKind.TEXT):
            specs.append({"type": "string", "name": inp.name, "required": True})
        else:
            specs.append({"type": "tensor", "name": inp.name, "tensor-spec": {
                "dtype": "float32" if inp.dtype == "string" else inp.dtype,
                "shape": [-1, *inp.row_shape]}})
    return {"inputs": json.dumps(specs)}


def write(directory: Path, *, flavors: dict[str, dict[str, Any]],
          inputs: tuple[ModelInput, ...], metadata: dict[str, Any], run_id: str = "",
          artifact_path: str = "model") -> Path:
    """Write the MLmodel file of a model Headrace logs."""
    doc: dict[str, Any] = {"artifact_path": artifact_path, "flavors": flavors,
                           "signature": signature_of(inputs), "metadata": metadata}
    if run_id:
        doc["run_id"] = run_id
    path = directory / MLMODEL
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
