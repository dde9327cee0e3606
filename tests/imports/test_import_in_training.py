"""Training meets imported versions: a job compares its model with an imported ONNX production
version through the trainers' backend for framework onnx (the same scores as the scorer's), and
a training request for framework onnx is refused where it enters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from headrace.contracts import TrainRequested
from headrace.imports import ImportRequest, from_file, import_model
from headrace.imports.serving import served
from headrace.trainers.backends import get_backend
from headrace.trainers.inputs import Inputs
from tests.imports import elsewhere


def test_an_imported_onnx_version_is_evaluated_by_the_trainers_as_the_scorer_scores_it(
        dfs: Path, tmp_path: Path) -> None:
    x, y = elsewhere.table(61)
    path = elsewhere.xgboost_booster(tmp_path / "m.json", x[:500], y[:500])
    mv = import_model(root=dfs, request=ImportRequest(source=from_file(path), name="xgb")
                      ).version
    m = mv.manifest
    (inp,) = m.input_signature()
    rows = Inputs({inp.name: x[500:]}, m.input_signature())
    got = get_backend(m.framework).load_exported(
        mv.path, task=m.task, n_features=len(m.features),
        signature=m.input_signature()).predict(rows)
    want = served(mv.path, m)({inp.name: x[500:]})
    assert got.shape == (100, 3)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_a_training_request_for_framework_onnx_is_refused_in_one_line() -> None:
    with pytest.raises(ValidationError, match="onnx models are imported") as e:
        TrainRequested(idempotency_key="k", model_name="m", framework="onnx",
                       dataset_uri="datasets/d.parquet")
    assert "imported (headrace models import), not trained" in str(e.value)


def test_an_imported_torchscript_version_is_evaluated_by_the_torch_backend(
        dfs: Path, tmp_path: Path) -> None:
    from headrace.imports.declarations import declarations

    x, y = elsewhere.table(62)
    path = elsewhere.torchscript_module(tmp_path / "m.pt", x[:500], y[:500])
    mv = import_model(root=dfs, request=ImportRequest(
        source=from_file(path), name="ts", declared=declarations(
            ["input:numeric=" + ",".join(elsewhere.FEATURES)], "0,1,2"))).version
    m = mv.manifest
    (inp,) = m.input_signature()
    got = get_backend(m.framework).load_exported(
        mv.path, task=m.task, n_features=len(m.features), signature=m.input_signature()
    ).predict(Inputs({inp.name: x[500:]}, m.input_signature()))
    want = served(mv.path, m)({inp.name: x[500:]})
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
