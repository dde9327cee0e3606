"""Your own model code: the example package under examples/ is pushed to the DFS, trained in
every framework, exported and reloaded; a tampered copy, unknown code and a bad entrypoint
are refused with one line and no job process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from headrace.contracts import CodeRef, ModelSpec
from headrace.core.errors import ValidationFailed
from headrace.store import code, versions
from headrace.trainers import jobs
from headrace.trainers.admission import admit
from headrace.trainers.backends import get_backend
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from headrace.trainers.limits import RequestCaps
from tests.trainers.conftest import REPO, request
from tests.trainers.test_families import one_thread

EXAMPLE = REPO / "examples" / "model_code"
ENTRY = {"tensorflow": "tabular_net.keras_model:build",
         "mxnet": "tabular_net.gluon_model:build", "torch": "tabular_net.torch_model:build"}


def _spec(ref: str, entrypoint: str) -> ModelSpec:
    return ModelSpec(model=CodeRef(code=ref, entrypoint=entrypoint), epochs=3, batch_size=32,
                     learning_rate=0.01)


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet", "torch"])
def test_the_example_package_trains_exports_and_reloads_with_the_same_predictions(
        framework: str, dfs: Path, demo: str) -> None:
    one_thread(framework)
    cv = code.push(dfs, EXAMPLE, "tabular-net")
    assert cv.ref == f"tabular-net@{cv.digest[:12]}"
    assert (dfs / "code" / "tabular-net" / cv.digest / "tabular_net" / "keras_model.py").is_file()
    req = request(demo, framework=framework, spec=_spec(cv.ref, ENTRY[framework]))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK, jobs.read_status(dfs, jid)

    mv = versions.resolve(dfs, "demo@production")
    m = mv.manifest
    assert m.code_version == cv.ref
    assert m.extra["code"]["sha256"] == cv.digest
    assert m.extra["code"]["entrypoint"] == ENTRY[framework]
    assert m.extra["gate"]["passed"] and m.metrics["accuracy"] > 0.8
    # Reloaded from the store, the export predicts what the in-training model did.
    ds = load_dataset(root=dfs, uri=demo, spec=req.spec)
    sp = split(ds, validation_split=req.spec.validation_split, seed=req.spec.seed)
    exported = get_backend(framework).load_exported(mv.path, task=m.task,
                                                    n_features=len(m.features))
    probs = exported.predict(sp.x_val)
    assert probs.shape == (len(sp.y_val), 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-4)
    assert float((probs.argmax(1) == sp.y_val).mean()) == pytest.approx(m.metrics["accuracy"])
    if framework == "tensorflow":  # the preprocess layer (learned on training rows) is inside
        layers = {layer.name: layer for layer in exported.model.layers  # type: ignore[attr-defined]
                  if type(layer).__name__ != "InputLayer"}
        assert next(iter(layers)) == "standardize"
        mean = np.asarray(layers["standardize"].mean).reshape(-1)
        np.testing.assert_allclose(mean, sp.x_train.columns["features"].mean(axis=0), rtol=1e-3,
                                   atol=1e-3)


def test_a_byte_changed_on_the_dfs_after_push_is_refused_with_the_file_named(
        dfs: Path, demo: str) -> None:
    cv = code.push(dfs, EXAMPLE, "tabular-net")
    target = cv.path / "tabular_net" / "config.py"
    target.write_bytes(target.read_bytes().replace(b"32", b"33"))
    req = request(demo, framework="mxnet", spec=_spec(cv.ref, ENTRY["mxnet"]))
    reason = (f"code {cv.ref}: its files no longer match its sha256 "
              "(changed tabular_net/config.py)")
    with pytest.raises(code.CodeTampered, match=r"no longer match"):
        admit(req, root=dfs, caps=RequestCaps())
    jid, _ = jobs.create_request(dfs, req)  # the job checks again, itself
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason == reason
    assert versions.list_models(dfs) == []
    # A planted file (bytecode next to the modules) is refused as well.
    target.write_bytes(target.read_bytes().replace(b"33", b"32"))
    code.verify(dfs, cv.ref)
    (cv.path / "tabular_net" / "__pycache__").mkdir()
    (cv.path / "tabular_net" / "__pycache__" / "config.cpython-311.pyc").write_bytes(b"x")
    with pytest.raises(code.CodeTampered, match=r"added tabular_net/__pycache__/config"):
        code.verify(dfs, cv.ref)


@pytest.mark.parametrize(("ref", "entrypoint", "expected"), [
    ("nobody@0123456789ab", "m:build",
     "code nobody@0123456789ab is not registered (push it with `headrace code push`)"),
    (None, "tabular_net.keras_model:train",
     "entrypoint tabular_net.keras_model:train: tabular_net/keras_model.py defines no train"),
    (None, "tabular_net.missing:build",
     "entrypoint tabular_net.missing:build: code {ref} has no module tabular_net.missing"),
])
def test_unknown_code_or_a_missing_entrypoint_is_refused_before_a_job_exists(
        dfs: Path, demo: str, ref: str | None, entrypoint: str, expected: str) -> None:
    cv = code.push(dfs, EXAMPLE, "tabular-net")
    req = request(demo, spec=_spec(ref or cv.ref, entrypoint))
    with pytest.raises(ValidationFailed) as info:
        admit(req, root=dfs, caps=RequestCaps())
    assert str(info.value) == expected.format(ref=cv.ref)
    # The job refuses the same on its own, in one line, without training anything.
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason == expected.format(ref=cv.ref)
    assert not jobs.checkpoints_dir(dfs, jid).exists() or not any(
        jobs.checkpoints_dir(dfs, jid).iterdir())


def test_push_is_content_addressed_skips_bytecode_and_refuses_symlinks_leaving(
        dfs: Path, tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    shutil.copytree(EXAMPLE, src)
    first = code.push(dfs, src, "tabular-net")
    (src / "tabular_net" / "__pycache__").mkdir(exist_ok=True)
    (src / "tabular_net" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (src / ".git").mkdir()
    assert code.push(dfs, src, "tabular-net") == first  # same bytes: same version
    assert sorted(first.files) == ["tabular_net/__init__.py", "tabular_net/config.py",
                                   "tabular_net/gluon_model.py", "tabular_net/keras_model.py",
                                   "tabular_net/torch_model.py"]
    (src / "tabular_net" / "config.py").write_text("WIDTH = 16\n")
    second = code.push(dfs, src, "tabular-net")
    assert second.digest != first.digest
    assert [c.ref for c in code.list_code(dfs)] == sorted([first.ref, second.ref],
                                                          key=[first.ref, second.ref].index)
    os.symlink(tmp_path / "secret.py", src / "tabular_net" / "leak.py")
    (tmp_path / "secret.py").write_text("TOKEN = 1\n")
    with pytest.raises(ValidationFailed, match=r"tabular_net/leak.py is a symlink leaving"):
        code.push(dfs, src, "tabular-net")


def test_headrace_code_push_prints_the_ref_and_code_list_shows_it(
        dfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from headrace.cli import main

    assert main(["--dfs-root", str(dfs), "code", "push", str(EXAMPLE), "--name",
                 "tabular-net"]) == 0
    ref = capsys.readouterr().out.strip()
    [stored] = code.list_code(dfs)
    assert ref == stored.ref and ref.startswith("tabular-net@")
    assert main(["--dfs-root", str(dfs), "code", "list"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if "tabular-net" in line]
    assert len(row) == 1 and ref in row[0] and f"{stored.size:,} B" in row[0]
    assert main(["--dfs-root", str(dfs), "code", "push", str(EXAMPLE / "nope"), "--name",
                 "x"]) == 1
    assert capsys.readouterr().err.strip().endswith("nope is not a directory")


IMAGE_NET = """
import keras


def preprocess(spec, inputs):
    return [keras.layers.Normalization(name="user_norm")]


def build(spec, inputs):
    (image,) = inputs  # one image input: (height, width, channels), values 0..1 here
    x_in = keras.Input(shape=image.row_shape, name=image.name)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x_in)
    x = keras.layers.Flatten()(x)
    return keras.Model(x_in, keras.layers.Dense(spec.n_outputs)(x), name="tiny_convnet")
"""


def test_tensorflow_user_code_trains_on_an_image_dataset_and_exports_raw_image_inputs(
        dfs: Path, tmp_path: Path) -> None:
    # The image folder goes through the family registry like a built-in family: the export
    # takes raw 0..255 pixels, rescaled and then normalised (adapted on the training rows)
    # inside the model.
    from headrace.trainers.dataset_files import put_dataset
    from tests.trainers import families_data as fd

    folder = fd.digits_folder(tmp_path / "digits", rows=400)
    uri = put_dataset(root=dfs, path=folder, name="digits").uri
    pkg = tmp_path / "pkg" / "imagenet_code"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(IMAGE_NET)
    cv = code.push(dfs, tmp_path / "pkg", "image-net")
    spec = ModelSpec(model=CodeRef(code=cv.ref, entrypoint="imagenet_code.net:build"),
                     epochs=4, batch_size=32, learning_rate=0.01)
    req = request(uri, framework="tensorflow", name="digits", spec=spec)
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK, jobs.read_status(dfs, jid)

    mv = versions.resolve(dfs, "digits@production")
    (inp,) = mv.manifest.input_signature()
    assert inp.kind.value == "image" and inp.row_shape == (8, 8, 1)
    assert mv.manifest.code_version == cv.ref and mv.manifest.metrics["accuracy"] > 0.6
    exported = get_backend("tensorflow").load_exported(mv.path, task=mv.manifest.task,
                                                       n_features=0)
    names = [layer.name for layer in exported.model.layers]  # type: ignore[attr-defined]
    assert names.index("rescale_image") < names.index("user_norm") < names.index("tiny_convnet")
    ds = load_dataset(root=dfs, uri=uri, spec=req.spec)
    sp = split(ds, validation_split=req.spec.validation_split, seed=req.spec.seed)
    probs = exported.predict(sp.x_val)
    assert probs.shape == (len(sp.y_val), 10)
    assert float((probs.argmax(1) == sp.y_val).mean()) == pytest.approx(
        mv.manifest.metrics["accuracy"])
