"""MLflow sources against a real tracking server: models logged by MLflow's own client
(sklearn, XGBoost, LightGBM, ONNX), registered and aliased, resolved by ``models:/NAME/1``,
``models:/NAME@champion`` and ``runs:/RUN/model``: the files downloaded are the bytes the
server's artifact store holds, the signature is mapped by name, the lineage names the run and
the registry version; the ONNX model downloaded predicts what its producer predicted."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from headrace.core.errors import ValidationFailed
from headrace.imports.mlflow_rest import MlflowUnavailable
from headrace.imports.mlflow_source import resolve
from headrace.store.signature import InputKind
from tests.imports.mlflow.conftest import FLAVORS, Logged

pytestmark = pytest.mark.slow
COLUMNS = ("sepal_length", "sepal_width", "petal_length", "petal_width")
FILES = {"sklearn": ("skops", "model.skops"), "xgboost": ("xgboost", "model.ubj"),
         "lightgbm": ("skops", "model.skops"), "onnx": ("onnx", "model.onnx")}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored(server_root: Path, name: str) -> list[Path]:
    """The artifact store's copies of ``name`` on the server's disk."""
    return sorted((server_root / "artifacts").rglob(name))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_uri_form_downloads_the_registered_model_with_its_signature_and_lineage(
        flavor: str, mlflow_server, logged_models: Logged, tmp_path: Path) -> None:
    m = logged_models.models[flavor]
    fmt, file = FILES[flavor]
    on_server = {_sha(p) for p in _stored(mlflow_server.root, file)}
    got = []
    for i, uri in enumerate((f"models:/{m['name']}/1", f"models:/{m['name']}@champion",
                             f"runs:/{m['run_id']}/model")):
        r = resolve(uri, tracking_uri=mlflow_server.url, dest=tmp_path / str(i))
        assert r.format == fmt and r.path.name == file and r.path.is_file()
        assert _sha(r.path) in on_server
        assert r.lineage["source"] == uri and r.lineage["mlflow_run_id"] == m["run_id"]
        assert r.lineage["mlflow_flavor"] == flavor
        got.append(_sha(r.path))
        if uri.startswith("models:/"):
            assert r.lineage["mlflow_model_name"] == m["name"]
            assert r.lineage["mlflow_model_version"] == "1"
        if flavor == "onnx":  # a tensor signature: one float32 input of 4 a row
            (inp,) = r.inputs
            assert (inp.kind, inp.dtype, inp.shape) == (InputKind.TENSOR, "float32", (4,))
        else:  # a DataFrame's columns, by name, in order
            (inp,) = r.inputs
            assert inp.kind == InputKind.NUMERIC and inp.columns == COLUMNS
    assert len(set(got)) == 1  # the three forms name the same model


def test_the_onnx_model_downloaded_predicts_what_its_producer_predicted(
        mlflow_server, logged_models: Logged, tmp_path: Path) -> None:
    import onnxruntime as ort

    m = logged_models.models["onnx"]
    r = resolve(f"models:/{m['name']}@champion", tracking_uri=mlflow_server.url, dest=tmp_path)
    sess = ort.InferenceSession(str(r.path), providers=["CPUExecutionProvider"])
    x = np.stack([np.asarray(logged_models.rows[c], np.float32) for c in COLUMNS], axis=1)
    proba = sess.run(None, {sess.get_inputs()[0].name: x})[1]
    np.testing.assert_allclose(proba, np.asarray(m["proba"]), atol=1e-6, rtol=0)


def test_a_skops_model_hands_on_the_types_its_producer_trusted(
        mlflow_server, logged_models: Logged, tmp_path: Path) -> None:
    m = logged_models.models["sklearn"]
    r = resolve(f"models:/{m['name']}/1", tracking_uri=mlflow_server.url, dest=tmp_path)
    assert r.details["serialization_format"] == "skops"
    assert r.details["skops_trusted_types"] == ["sklearn.tree._tree.Tree"]


@pytest.mark.parametrize(("uri", "says"), [
    ("models:/{name}/9", "the registry has no version 9 of model '{name}'"),
    ("models:/{name}@nobody", "the registry has no alias 'nobody' of model '{name}'"),
    ("models:/never-registered/1", "the registry has no version 1 of model 'never-registered'"),
    ("runs:/0123456789abcdef0123456789abcdef/model",
     "the tracking server has no run 0123456789abcdef0123456789abcdef"),
    ("runs:/{run}/elsewhere", "has no model at 'elsewhere'"),
])
def test_what_the_server_does_not_hold_is_refused_in_one_line(
        uri: str, says: str, mlflow_server, logged_models: Logged, tmp_path: Path) -> None:
    m = logged_models.models["xgboost"]
    uri = uri.format(name=m["name"], run=m["run_id"])
    with pytest.raises(ValidationFailed) as err:
        resolve(uri, tracking_uri=mlflow_server.url, dest=tmp_path)
    assert says.format(name=m["name"]) in str(err.value) and "\n" not in str(err.value)
    assert not any(tmp_path.rglob("MLmodel"))


def test_an_unreachable_server_is_a_retriable_error(tmp_path: Path) -> None:
    from headrace.core.ports import free_port

    with pytest.raises(MlflowUnavailable, match="is unreachable"):
        resolve("models:/m/1", tracking_uri=f"http://127.0.0.1:{free_port()}", dest=tmp_path)


def test_no_tracking_uri_names_the_settings(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed, match="set MLFLOW_TRACKING_URI"):
        resolve("models:/m/1", tracking_uri=None, dest=tmp_path)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_what_the_file_importer_is_handed_predicts_what_the_producer_predicted(
        flavor: str, mlflow_server, logged_models: Logged, tmp_path: Path) -> None:
    """MLflow 3's skops files (sklearn, LightGBM's scikit-learn API) are handed on as a
    joblib dump and a LightGBM text model; every handed-on file, loaded by its library,
    gives the producer's probabilities on the reference rows."""
    import pandas as pd

    from headrace.imports.mlflow_handoff import handed_on

    m = logged_models.models[flavor]
    r = resolve(f"models:/{m['name']}@champion", tracking_uri=mlflow_server.url,
                dest=tmp_path / "dl")
    path, fmt = handed_on(r, tmp_path / "handed")
    assert fmt == {"sklearn": "sklearn", "lightgbm": "lightgbm", "xgboost": "xgboost",
                   "onnx": "onnx"}[flavor]
    rows = pd.DataFrame(logged_models.rows)[list(COLUMNS)]
    if fmt == "sklearn":
        import joblib

        proba = joblib.load(path).predict_proba(rows)
    elif fmt == "lightgbm":
        import lightgbm

        proba = lightgbm.Booster(model_file=str(path)).predict(rows.to_numpy())
    elif fmt == "xgboost":
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(str(path))
        proba = booster.predict(xgboost.DMatrix(rows))
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        proba = sess.run(None, {sess.get_inputs()[0].name: rows.to_numpy(np.float32)})[1]
    np.testing.assert_allclose(np.asarray(proba), np.asarray(m["proba"]), atol=1e-6, rtol=0)


def test_a_skops_file_with_a_type_its_mlmodel_does_not_trust_is_refused(
        mlflow_server, logged_models: Logged, tmp_path: Path) -> None:
    import dataclasses

    from headrace.imports.mlflow_handoff import handed_on

    m = logged_models.models["sklearn"]
    r = resolve(f"models:/{m['name']}/1", tracking_uri=mlflow_server.url, dest=tmp_path)
    distrusted = dataclasses.replace(r, details={**r.details, "skops_trusted_types": []})
    with pytest.raises(ValidationFailed, match="does not load with the types its MLmodel "
                       "trusts") as err:
        handed_on(distrusted, tmp_path / "handed")
    assert "\n" not in str(err.value) and not (tmp_path / "handed").exists()
