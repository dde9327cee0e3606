"""ONNX export of Keras (TensorFlow) versions: a text version trained by a real job exports
through Keras's ``model.export(format="onnx")`` (tf2onnx), checked by ONNX Runtime on its
validation split and recorded with the ``keras`` feed (text as its codec's ids, by input name);
``headrace predict --runtime onnxruntime`` then gives the TensorFlow runtime's labels; so does a
category version (format 2: its ids made on the host). A version before format 2, whose graph
looks strings up itself, is refused in one line.

The export needs tf2onnx (the ``onnx`` extra): skipped where it is not installed (the refusal
runs before tf2onnx is needed).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.cli import main
from headrace.contracts import ModelSpec, TrainRequested
from headrace.scorers import adapters
from headrace.store import versions
from headrace.store.exports import read_export
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.datasets import load_dataset, split
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from headrace.trainers.onnx_export import TOLERANCE
from tests.scorers.test_scoring_trained_categories import _train
from tests.trainers import families_data as fd


def _predict(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dfs: Path,
             *args: str) -> list[dict[str, Any]]:
    monkeypatch.setattr(adapters, "_chosen", [])  # a process of its own
    capsys.readouterr()
    assert main(["--dfs-root", str(dfs), "predict", *args, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.slow
def test_a_keras_text_version_exports_to_onnx_and_scores_on_onnx_runtime(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tf2onnx")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = fd.intents_jsonl(tmp_path / "intents.jsonl")
    uri = put_dataset(root=dfs, path=data).uri
    spec = ModelSpec(model="text", epochs=3, batch_size=32, hidden=(16,), embedding_dim=16,
                     max_length=16, learning_rate=0.01)
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="intents",
                         framework="tensorflow", dataset_uri=uri, spec=spec)
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK, jobs.read_status(dfs, jid)

    capsys.readouterr()
    assert main(["--dfs-root", str(dfs), "models", "export", "intents:1", "--format",
                 "onnx"]) == 0
    assert "exported intents:1 as ONNX" in capsys.readouterr().out
    mv = versions.load_version(dfs, "intents", 1)  # the version itself is untouched
    export = read_export(mv.path, "onnx")
    assert export is not None
    record = export.record
    assert record["sha256"] == hashlib.sha256(export.path.read_bytes()).hexdigest()
    assert record["feed"] == "keras" and record["framework"] == "tensorflow"
    ds = load_dataset(root=dfs, uri=uri, spec=spec)
    x_val = split(ds, validation_split=spec.validation_split, seed=spec.seed).x_val
    assert record["check"]["rows"] == len(x_val) and record["check"]["labels_identical"]
    assert record["check"]["max_abs_diff"] <= TOLERANCE

    # The scorer's onnxruntime runtime on records never trained on: TensorFlow's labels.
    rows = tmp_path / "held.jsonl"
    held = [json.loads(line) for line in
            fd.intents_jsonl(tmp_path / "held-src.jsonl", rows=40, seed=9).read_text()
            .splitlines()]
    rows.write_text("".join(json.dumps({"utterance": r["utterance"]}) + "\n" for r in held))
    want = _predict(capsys, monkeypatch, dfs, "intents:1", str(rows))
    got = _predict(capsys, monkeypatch, dfs, "intents:1", str(rows), "--runtime", "onnxruntime")
    assert [g["label"] for g in got] == [w["label"] for w in want]
    diff = np.abs(np.asarray([g["scores"] for g in got]) - np.asarray([w["scores"] for w in want]))
    assert diff.max() <= record["check"]["tolerance"]


@pytest.mark.slow
def test_a_keras_category_version_exports_and_scores_on_onnx_runtime(
        dfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From model format 2 a category takes the ids its codec makes on the host (no
    ``StringLookup`` in the graph), so tf2onnx converts the whole model."""
    pytest.importorskip("tf2onnx")
    mv = _train(dfs, tmp_path, "mixed", "tensorflow")
    capsys.readouterr()
    assert main(["--dfs-root", str(dfs), "models", "export", f"mixed:{mv.version}", "--format",
                 "onnx"]) == 0, capsys.readouterr().err
    export = read_export(mv.path, "onnx")
    assert export is not None and export.record["check"]["labels_identical"]
    rows = tmp_path / "held.jsonl"
    rows.write_text("".join(json.dumps({"colour": c, "size": s}) + "\n" for c, s in
                            [("red", 900.0), ("green", 1500.0), ("purple", 700.0),
                             ("blue", 1250.0)]))  # purple: never seen in training
    want = _predict(capsys, monkeypatch, dfs, f"mixed:{mv.version}", str(rows))
    got = _predict(capsys, monkeypatch, dfs, f"mixed:{mv.version}", str(rows),
                   "--runtime", "onnxruntime")
    assert [g["label"] for g in got] == [w["label"] for w in want]
    diff = np.abs(np.asarray([g["scores"] for g in got]) - np.asarray([w["scores"] for w in want]))
    assert diff.max() <= export.record["check"]["tolerance"]


def test_a_keras_version_looking_strings_up_in_its_graph_is_refused_in_one_line(
        tmp_path: Path) -> None:
    """A version before model format 2 (no vocabulary file: ``StringLookup`` in the graph):
    tf2onnx leaves the lookup as ``LookupTableFindV2``, which ONNX Runtime cannot run."""
    from headrace.core.errors import ValidationFailed
    from headrace.store.manifest import Manifest
    from headrace.store.signature import InputKind, ModelInput
    from headrace.trainers.backends import keras_onnx

    colour = ModelInput(name="colour", kind=InputKind.CATEGORY, dtype="string",
                        preprocessing=("vocabulary", "one_hot"))
    m = Manifest(name="old", version=1, framework="tensorflow", task="classifier",
                 features=("colour",), label="label", classes=("0", "1"), inputs=(colour,),
                 format_version=1)
    with pytest.raises(ValidationFailed, match="input 'colour' takes strings"):
        keras_onnx.export(tmp_path, m, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()
