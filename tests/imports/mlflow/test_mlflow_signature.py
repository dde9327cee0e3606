"""An MLflow signature mapped to Headrace's inputs by name, and what has no codec refused in
one line naming the input; the MLmodel Headrace writes reads back as it was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.core.errors import ValidationFailed
from headrace.imports import mlflow_model
from headrace.imports.mlflow_uri import parse
from headrace.store.signature import InputKind, ModelInput


def _sig(*specs: dict[str, object]) -> dict[str, str]:
    return {"inputs": json.dumps(list(specs))}


def test_numeric_columns_become_one_numeric_input_and_strings_categories() -> None:
    got = mlflow_model.inputs_of(_sig({"type": "double", "name": "a"},
                                      {"type": "string", "name": "city"},
                                      {"type": "long", "name": "b"}), where="m")
    assert got[0] == ModelInput(name="features", kind=InputKind.NUMERIC, columns=("a", "b"),
                                shape=(2,))
    assert got[1].name == "city" and got[1].kind == InputKind.CATEGORY


def test_a_tensor_keeps_its_dtype_and_per_row_shape() -> None:
    (t,) = mlflow_model.inputs_of(_sig({"type": "tensor", "name": "img", "tensor-spec": {
        "dtype": "uint8", "shape": [-1, 8, 8, 1]}}), where="m")
    assert (t.kind, t.dtype, t.shape) == (InputKind.TENSOR, "uint8", (8, 8, 1))


@pytest.mark.parametrize(("spec", "says"), [
    ({"type": "binary", "name": "blob"}, "input 'blob' is of type binary"),
    ({"type": "datetime", "name": "when"}, "input 'when' is of type datetime"),
    ({"type": "tensor", "name": "seq", "tensor-spec": {"dtype": "float32", "shape": [-1, -1]}},
     "input 'seq' is a tensor of float32 shape [-1, -1]"),
])
def test_an_input_without_a_codec_is_refused_naming_it(spec: dict[str, object],
                                                       says: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        mlflow_model.inputs_of(_sig({"type": "double", "name": "ok"}, spec), where="models:/m/1")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_mlmodel_headrace_writes_reads_back(tmp_path: Path) -> None:
    inputs = (ModelInput(name="features", kind=InputKind.NUMERIC, columns=("x", "y"),
                         shape=(2,)),
              ModelInput(name="colour", kind=InputKind.CATEGORY, dtype="string"))
    mlflow_model.write(tmp_path, flavors={"headrace": {"data": "version"}}, inputs=inputs,
                       metadata={"classes": ["no", "yes"]})
    got = mlflow_model.read(tmp_path, where="here")
    assert got.flavor == "headrace" and got.model_file == tmp_path / "version"
    assert got.inputs == inputs and got.labels == ("no", "yes")


def test_a_directory_with_no_flavor_headrace_imports_is_refused(tmp_path: Path) -> None:
    (tmp_path / "MLmodel").write_text("flavors:\n  transformers: {}\n")
    with pytest.raises(ValidationFailed, match="has flavors transformers; Headrace imports "
                       "onnx, xgboost, lightgbm, sklearn, pytorch, keras"):
        mlflow_model.read(tmp_path, where="models:/m/1")


@pytest.mark.parametrize("uri", ["models:/m", "models:/m/latest", "runs:/xyz/model",
                                 "models:/m@", "s3://bucket/model"])
def test_uris_that_name_no_model_are_refused(uri: str) -> None:
    with pytest.raises(ValidationFailed, match="not an MLflow model URI"):
        parse(uri)
