"""``headrace models export NAME:VERSION --format onnx``: a torch version trained by a real job
is exported beside itself, checked by ONNX Runtime on its validation split (labels identical,
scores within the tolerance) and recorded; what cannot be exported is refused in one line."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.contracts import ModelSpec, TrainRequested
from headrace.store import versions
from headrace.store.manifest import Manifest
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from headrace.trainers.onnx_export import TOLERANCE
from tests.trainers import families_data as fd
from tests.trainers.test_families import one_thread


@pytest.mark.slow
def test_a_torch_text_version_exports_to_onnx_that_agrees_on_its_validation_split(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_thread("torch")
    uri = put_dataset(root=dfs, path=fd.intents_jsonl(tmp_path / "intents.jsonl")).uri
    spec = ModelSpec(model="text", epochs=3, batch_size=32, hidden=(16,), embedding_dim=16,
                     max_length=16, learning_rate=0.01)
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="intents",
                         framework="torch", dataset_uri=uri, spec=spec)
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK, jobs.read_status(dfs, jid)

    assert main(["--dfs-root", str(dfs), "models", "export", "intents:1", "--format",
                 "onnx"]) == 0
    assert "exported intents:1 as ONNX" in capsys.readouterr().out
    mv = versions.load_version(dfs, "intents", 1)  # the version itself is untouched
    where = mv.path / "exports" / "onnx"
    record = json.loads((where / "export.json").read_text())
    onnx_bytes = (where / "model.onnx").read_bytes()
    assert record["sha256"] == hashlib.sha256(onnx_bytes).hexdigest()
    ds = load_dataset(root=dfs, uri=uri, spec=spec)
    x_val = split(ds, validation_split=spec.validation_split, seed=spec.seed).x_val
    assert record["check"]["rows"] == len(x_val) and record["check"]["labels_identical"]
    assert record["check"]["max_abs_diff"] <= TOLERANCE

    # Independently: ONNX Runtime on the ids the version's vocabulary gives.
    import onnxruntime

    from headrace.codecs import text as text_codec
    from headrace.store import tokens
    (text,) = mv.manifest.inputs
    ids = text_codec.token_ids(text, x_val.arrays()["utterance"],  # tokens, bigrams, lead ids
                               tokens.read_vocabulary(mv.path / str(text.vocabulary)))
    assert ids.shape == (len(x_val), 48)
    ids = ids.astype(np.float32)
    session = onnxruntime.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    probs = session.run(None, {"x0": ids})[0]
    assert probs.shape == (len(x_val), len(mv.manifest.classes))
    from headrace.trainers.backends import get_backend
    source = get_backend("torch").load_exported(mv.path, task=mv.manifest.task, n_features=0,
                                                signature=mv.manifest.inputs).predict(x_val)
    np.testing.assert_allclose(probs, source, atol=TOLERANCE)


def test_an_mxnet_version_or_another_format_is_refused_in_one_line(
        dfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Refused from the manifest alone: no framework is loaded for it.
    manifest = Manifest(name="mx", framework="mxnet", task="classifier", features=("a",),
                        label="y", classes=("no", "yes"))
    versions.publish(dfs, manifest, lambda d: (d / "model-symbol.json").write_bytes(b"{}"))
    assert main(["--dfs-root", str(dfs), "models", "export", "mx:1", "--format", "onnx"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mxnet model" in err[0] and "torch and tensorflow" in err[0], err
    assert main(["--dfs-root", str(dfs), "models", "export", "mx:1", "--format", "tflite"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--format tflite: use onnx or mlflow" in err[0], err
    assert not (dfs / "models" / "mx" / "1" / "exports").exists()
