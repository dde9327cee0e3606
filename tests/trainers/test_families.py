"""Model families on real data shipped in packages (scikit-learn's digits, iris, wine,
diabetes) and a templated intent corpus, through ``datasets put`` and a whole job; every
published version is reloaded from the store and predicts what the job measured."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from headrace.contracts import ModelSpec, Task, TrainRequested
from headrace.store import versions
from headrace.store.signature import InputKind
from headrace.trainers import jobs
from headrace.trainers.backends import get_backend
from headrace.trainers.dataset_files import put_dataset, show_dataset
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.trainers import families_data as fd

FRAMEWORKS = ["tensorflow", "mxnet", "torch"]
FILES = {"tensorflow": {"model.keras"}, "mxnet": {"model-symbol.json", "model-0000.params"},
         "torch": {"model.pt2"}}
CNN = {"model": "cnn", "epochs": 8, "batch_size": 64, "hidden": (64,), "learning_rate": 0.003}


def one_thread(framework: str) -> None:
    if framework == "torch":  # in-process: the cores are shared
        import torch

        torch.set_num_threads(1)


def train(dfs: Path, uri: str, framework: str, **spec: Any) -> versions.ModelVersion:
    one_thread(framework)
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="m", framework=framework,
                         dataset_uri=uri, spec=ModelSpec(**spec))
    jid, _ = jobs.create_request(dfs, req)
    code = run_job(root=dfs, job_id=jid, conn=None)
    st = jobs.read_status(dfs, jid)
    assert code == ExitCode.OK, st.reason if st else code
    assert st is not None and st.version is not None
    mv = versions.load_version(dfs, "m", st.version)  # verifies every sha256
    assert_reload_reproduces_metrics(dfs, mv, req.spec)
    return mv


def assert_reload_reproduces_metrics(dfs: Path, mv: versions.ModelVersion,
                                     spec: ModelSpec) -> None:
    """The export, loaded from the store by its signature, gives the job's validation metrics."""
    m = mv.manifest
    ds = load_dataset(root=dfs, uri=m.dataset.uri if m.dataset else "", spec=spec)
    sp = split(ds, validation_split=spec.validation_split, seed=spec.seed)
    out = get_backend(m.framework).load_exported(
        mv.path, task=m.task, n_features=len(m.features),
        signature=m.input_signature()).predict(sp.x_val)
    if m.task == Task.CLASSIFIER:
        assert out.shape == (len(sp.y_val), len(m.classes))
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-4)
        assert float((out.argmax(1) == sp.y_val).mean()) == pytest.approx(m.metrics["accuracy"])
    else:
        r2 = 1 - np.mean((out.reshape(-1) - sp.y_val) ** 2) / np.var(sp.y_val)
        assert r2 == pytest.approx(m.metrics["r2"], abs=1e-4)


@pytest.fixture(scope="module")
def digits_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fd.digits_folder(tmp_path_factory.mktemp("digits") / "digits")


def test_an_image_folder_becomes_a_dataset_with_an_image_column_and_label_counts(
        dfs: Path, digits_png: Path) -> None:
    info = put_dataset(root=dfs, path=digits_png, name="digits")
    assert info.uri == "datasets/digits.parquet" and info.rows == 1797
    assert info.kinds == {"image": "image", "label": "label"}
    assert sum(info.label_counts.values()) == 1797 and len(info.label_counts) == 10
    table = pq.read_table(dfs / info.uri)
    assert table.column("image")[0].as_py()[:8] == b"\x89PNG\r\n\x1a\n"  # stays encoded
    assert len(info.fingerprint) == 64 and show_dataset(root=dfs, name="digits") == info


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_cnn_learns_digits_from_an_image_folder(framework: str, dfs: Path,
                                                digits_png: Path) -> None:
    uri = put_dataset(root=dfs, path=digits_png, name="digits").uri
    mv = train(dfs, uri, framework, **CNN)
    assert mv.manifest.metrics["accuracy"] >= 0.95, mv.manifest.metrics
    (image,) = mv.manifest.inputs
    assert (image.kind, image.height, image.width, image.channels) == (InputKind.IMAGE, 8, 8, 1)
    assert mv.manifest.family == "cnn" and mv.manifest.outputs[0].classes == tuple("0123456789")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_cnn_learns_digits_from_a_tensor_column(framework: str, dfs: Path,
                                                tmp_path: Path) -> None:
    info = put_dataset(root=dfs, path=fd.digits_tensor_parquet(tmp_path / "d.parquet"))
    assert info.kinds == {"pixels": "tensor", "label": "label"}
    mv = train(dfs, info.uri, framework, **CNN)
    assert mv.manifest.metrics["accuracy"] >= 0.95, mv.manifest.metrics
    assert mv.manifest.inputs[0].shape == (8, 8)


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_mobilenet_v2_trains_an_epoch_on_upscaled_digits_and_exports(
        framework: str, dfs: Path, tmp_path: Path) -> None:
    folder = fd.digits_folder(tmp_path / "few", rows=100)
    uri = put_dataset(root=dfs, path=folder, name="few").uri
    mv = train(dfs, uri, framework, model="mobilenet_v2", epochs=1, batch_size=32,
               image_size=(32, 32))
    (image,) = mv.manifest.inputs
    assert (image.height, image.width) == (32, 32) and mv.manifest.family == "mobilenet_v2"
    assert FILES[framework] <= set(mv.manifest.files)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("which", ["iris", "wine"])
def test_mlp_standardises_unscaled_tabular_data_inside_the_model(
        framework: str, which: str, dfs: Path, tmp_path: Path) -> None:
    uri = put_dataset(root=dfs, path=fd.tabular_csv(tmp_path / f"{which}.csv", which)).uri
    mv = train(dfs, uri, framework, epochs=30, batch_size=16, hidden=(32,),
               learning_rate=0.01)
    # iris: 0.9 is also what a scaled logistic regression gets on this split (27 of 30)
    assert mv.manifest.metrics["accuracy"] >= 0.9, mv.manifest.metrics
    (features,) = mv.manifest.inputs
    assert features.name == "features" and features.preprocessing == ("standardize",)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_regressor_on_unscaled_diabetes_clearly_beats_the_mean(framework: str, dfs: Path,
                                                                 tmp_path: Path) -> None:
    # R^2 0.9 is out of reach on diabetes for any model (a linear regression gets ~0.52 on
    # this split); the mean predictor gets ~0.
    uri = put_dataset(root=dfs, path=fd.tabular_csv(tmp_path / "d.csv", "diabetes")).uri
    mv = train(dfs, uri, framework, task="regressor", epochs=20, batch_size=32, hidden=(32,),
               learning_rate=0.01)
    assert mv.manifest.metrics["r2"] >= 0.35, mv.manifest.metrics


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_text_learns_intents_from_raw_sentences(framework: str, dfs: Path,
                                                tmp_path: Path) -> None:
    info = put_dataset(root=dfs, path=fd.intents_jsonl(tmp_path / "intents.jsonl"))
    assert info.kinds == {"utterance": "text", "label": "label"}
    mv = train(dfs, info.uri, framework, model="text", epochs=5, batch_size=32, hidden=(32,),
               learning_rate=0.01, embedding_dim=32, max_length=16)
    assert mv.manifest.metrics["accuracy"] >= 0.9, mv.manifest.metrics
    (text,) = mv.manifest.inputs
    assert text.kind == InputKind.TEXT and text.max_length == 16
    if framework in ("mxnet", "torch"):  # the adapter applies the vocabulary it ships
        assert text.vocabulary == "vocabulary-utterance.json"
        assert text.vocabulary in mv.manifest.files


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_category_columns_are_looked_up_inside_the_model(framework: str, dfs: Path,
                                                         tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    colour = rng.choice(["red", "green", "blue"], 300)
    size = rng.normal(1000, 300, 300)
    label = (colour == "red") | (size > 1200)
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(f'{{"colour": "{c}", "size": {s}, "label": {int(y)}}}\n'
                            for c, s, y in zip(colour, size, label, strict=True)))
    info = put_dataset(root=dfs, path=path)
    assert info.kinds == {"colour": "category", "size": "numeric", "label": "label"}
    mv = train(dfs, info.uri, framework, epochs=20, batch_size=32, hidden=(16,),
               learning_rate=0.02)
    assert mv.manifest.metrics["accuracy"] >= 0.9, mv.manifest.metrics
    kinds = {i.name: i.kind for i in mv.manifest.inputs}
    assert kinds == {"features": InputKind.NUMERIC, "colour": InputKind.CATEGORY}


def test_a_family_that_does_not_fit_the_columns_fails_with_one_line(dfs: Path,
                                                                    tmp_path: Path) -> None:
    uri = put_dataset(root=dfs, path=fd.tabular_csv(tmp_path / "iris.csv", "iris")).uri
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="m",
                         framework="mxnet", dataset_uri=uri, spec=ModelSpec(model="cnn"))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason is not None and "\n" not in st.reason
    assert "model cnn takes one image (or 2-D/3-D tensor) column" in st.reason


def test_unknown_families_and_out_of_bounds_hyperparameters_are_refused() -> None:
    from headrace.core.errors import ValidationFailed
    from headrace.trainers.api import build_request

    with pytest.raises(ValidationFailed, match="unknown model family 'gpt'"):
        build_request(model_name="m", framework="mxnet", dataset_uri="d.parquet", model="gpt")
    with pytest.raises(ValidationFailed, match="filters"):
        build_request(model_name="m", framework="mxnet", dataset_uri="d.parquet",
                      model="cnn", params={"filters": ["0"]})
    with pytest.raises(ValidationFailed, match="init_weights"):
        build_request(model_name="m", framework="mxnet", dataset_uri="d.parquet",
                      init_weights="/etc/passwd")
    req = build_request(model_name="m", framework="mxnet", dataset_uri="d.parquet",
                        model="cnn", params={"filters": ["8", "16"], "image_size": ["32", "32"]})
    assert req.spec.filters == (8, 16) and req.spec.image_size == (32, 32)


def test_tensorflow_starts_from_initial_weights_on_the_dfs(dfs: Path, tmp_path: Path) -> None:
    uri = put_dataset(root=dfs, path=fd.tabular_csv(tmp_path / "wine.csv", "wine")).uri
    first = train(dfs, uri, "tensorflow", epochs=10, batch_size=16, hidden=(16,),
                  learning_rate=0.01)
    init = f"models/m/{first.version}/model.keras"
    second = train(dfs, uri, "tensorflow", epochs=1, batch_size=16, hidden=(16,),
                   learning_rate=1e-6, init_weights=init)
    # One epoch at a tiny learning rate from the first model's weights keeps its accuracy.
    assert second.manifest.metrics["accuracy"] == pytest.approx(
        first.manifest.metrics["accuracy"], abs=0.03)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_scorer_adapters_load_a_standardising_tabular_model_and_feed_it_raw_values(
        framework: str, dfs: Path, tmp_path: Path) -> None:
    from headrace.scorers.adapters import adapter_for

    uri = put_dataset(root=dfs, path=fd.tabular_csv(tmp_path / "wine.csv", "wine")).uri
    mv = train(dfs, uri, framework, epochs=5, batch_size=16, hidden=(16,), learning_rate=0.01)
    spec = ModelSpec(epochs=5, batch_size=16, hidden=(16,), learning_rate=0.01)
    ds = load_dataset(root=dfs, uri=uri, spec=spec)
    raw = ds.x.columns["features"]  # unscaled values, as records carry them
    assert raw.max() > 1000
    fn = adapter_for(framework).load(version_path=mv.path, manifest=mv.manifest, device="cpu",
                                     max_batch=256)
    expected = get_backend(framework).load_exported(
        mv.path, task=Task.CLASSIFIER, n_features=13,
        signature=mv.manifest.input_signature()).predict(ds.x)
    np.testing.assert_allclose(fn(np.ascontiguousarray(raw)), expected, rtol=1e-4, atol=1e-5)


def test_mxnet_starts_from_initial_weights_on_the_dfs(dfs: Path, tmp_path: Path) -> None:
    uri = put_dataset(root=dfs, path=fd.digits_tensor_parquet(tmp_path / "d.parquet")).uri
    first = train(dfs, uri, "mxnet", **{**CNN, "epochs": 4})
    assert first.manifest.job_id is not None
    ckdir = jobs.checkpoints_dir(dfs, first.manifest.job_id)
    last = max((p for p in ckdir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    (dfs / "datasets" / "init.npz").write_bytes((last / "body.npz").read_bytes())
    second = train(dfs, uri, "mxnet", **{**CNN, "epochs": 1, "learning_rate": 1e-7},
                   init_weights="datasets/init.npz")
    assert second.manifest.metrics["accuracy"] == pytest.approx(
        first.manifest.metrics["accuracy"], abs=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("family", ["resnet50", "mobilenet", "vgg16"])
def test_every_application_family_builds_offline_and_predicts(framework: str,
                                                              family: str) -> None:
    from headrace.store.signature import ModelInput
    from headrace.trainers.inputs import Inputs, ModelPlan

    sig = (ModelInput(name="image", kind=InputKind.IMAGE, height=32, width=32, channels=3,
                      shape=(32, 32, 3)),)
    plan = ModelPlan(family, sig, (), 4)
    model = get_backend(framework).create(spec=ModelSpec(model=family), n_features=0,
                                          n_outputs=4, seed=0, plan=plan)
    blob = fd.digits_png_bytes()
    probs = model.predict(Inputs({"image": np.array([blob] * 3, dtype=object)}, sig))
    assert probs.shape == (3, 4)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
