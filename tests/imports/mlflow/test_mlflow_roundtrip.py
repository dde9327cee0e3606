"""MLflow both ways on a real server: ``headrace models export NAME:V --format mlflow`` logs
the version as an MLflow model and registers it; ``models:/NAME/1`` brings the very same files
(every sha256) back as a version of another model, with lineage to the run; that version,
scored from the stream on the embedded broker, predicts what ``headrace predict`` of the
original does, record by record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.cli import main
from headrace.core.errors import ValidationFailed
from headrace.core.settings import Settings
from headrace.imports.mlflow_export import MlflowSettings, import_version
from headrace.imports.mlflow_rest import MlflowClient
from headrace.scorers import adapters
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from tests.fixtures import score
from tests.scorers.conftest import data, send_json, stream  # noqa: F401  (fixtures)
from tests.scorers.test_onnx_runtime import _records
from tests.scorers.test_scoring_trained_categories import _train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def _predict_apart(dfs: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """``headrace predict --json`` in a process of its own, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", "from headrace.cli import main; main()",
                          "--dfs-root", str(dfs), "predict", *args, "--json"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines()], out.stderr


def test_export_to_mlflow_and_import_back_scores_from_the_stream_as_the_original(
        settings: Settings, conn: KafkaConnection, dfs: Path, stream: str, data: str,  # noqa: F811
        tmp_path: Path, mlflow_server, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = _train(dfs, tmp_path, f"{stream}-src", "torch")
    ref = f"{src.name}:{src.version}"
    monkeypatch.setenv("HEADRACE_MLFLOW_TRACKING_URI", mlflow_server.url)
    capsys.readouterr()
    assert main(["--dfs-root", str(dfs), "models", "export", ref, "--format", "mlflow"]) == 0
    out = capsys.readouterr().out
    assert f"registered as models:/{src.name}/1" in out, out

    c = MlflowClient.at(mlflow_server.url)
    mv = c.get("model-versions/get", name=src.name, version="1")["model_version"]
    tags = {t["key"]: t["value"] for t in mv["tags"]}
    assert tags == {"headrace.version": str(src.version),
                    "headrace.manifest_sha256": src.manifest_sha256}
    run = c.get("runs/get", run_id=mv["run_id"])["run"]
    logged = {m["key"]: m["value"] for m in run["data"]["metrics"]}
    assert logged == pytest.approx(src.manifest.metrics)

    back = import_version(root=dfs, source=f"models:/{src.name}/1", name=stream,
                          settings=MlflowSettings(mlflow_server.url))
    assert (back.name, back.version) == (stream, 1)
    assert back.manifest.files == src.manifest.files  # the same bytes, every sha256
    assert back.manifest.inputs == src.manifest.inputs
    assert back.manifest.classes == src.manifest.classes
    imported = back.manifest.extra["imported"]
    assert imported["mlflow_run_id"] == mv["run_id"] and imported["from_version"] == ref
    versions.set_alias(dfs, stream, back.version, reason="imported from MLflow")

    records = _records(40)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, want, err = _predict_apart(dfs, ref, str(rows))
    assert code == 0 and len(want) == len(records), err
    keys = send_json(conn, data, records)
    monkeypatch.setattr(adapters, "_chosen", [])
    # A torch model runs on its own framework under the default runtime.
    msgs, _ = score(settings, conn, expect=len(records))
    got = {p["key"]: p for p in (json.loads(m.value()) for m in msgs)}
    assert sorted(got) == sorted(keys)
    for key, w in zip(keys, want, strict=True):
        assert got[key]["model_version"] == 1 and got[key]["label"] == w["label"]
        np.testing.assert_allclose(got[key]["scores"], w["scores"], atol=1e-6, rtol=0)


def test_exporting_without_a_tracking_uri_is_one_line(
        dfs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HEADRACE_MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["--dfs-root", str(dfs), "models", "export", "m:1", "--format", "mlflow"]) != 0
    err = capsys.readouterr().err.strip()
    assert "set HEADRACE_MLFLOW_TRACKING_URI" in err and "\n" not in err


def test_a_foreign_flavor_is_left_to_the_file_importer(tmp_path: Path) -> None:
    from headrace.imports.mlflow_export import publish_headrace_flavor
    from headrace.imports.mlflow_source import ResolvedSource

    src = ResolvedSource(path=tmp_path / "model.ubj", format="xgboost", inputs=(),
                         lineage={"source": "models:/x/1"})
    with pytest.raises(ValidationFailed, match="models:/x/1 is a xgboost model"):
        publish_headrace_flavor(root=tmp_path, source=src, name="x")


def test_an_exported_version_with_onnx_is_served_by_mlflow_itself_as_predict_does(
        dfs: Path, demo: str, tmp_path: Path, mlflow_server,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The MLflow model Headrace writes is a real one: MLflow's ``pyfunc.load_model`` of
    ``models:/NAME/1`` (its onnx flavor) predicts what ``headrace predict`` does."""
    import subprocess
    import uuid

    from headrace.contracts import ModelSpec, TrainRequested
    from headrace.trainers import jobs
    from headrace.trainers.executors.base import ExitCode
    from headrace.trainers.job_process import run_job
    from tests.imports.mlflow.conftest import mlflow_python
    from tests.trainers.test_families import one_thread

    one_thread("torch")
    name = "p" + uuid.uuid4().hex[:8]
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name, framework="torch",
                         dataset_uri=demo, spec=ModelSpec(epochs=3, hidden=(16,),
                                                          batch_size=32))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    monkeypatch.setenv("HEADRACE_MLFLOW_TRACKING_URI", mlflow_server.url)
    assert main(["--dfs-root", str(dfs), "models", "export", f"{name}:1", "--format",
                 "onnx"]) == 0
    assert main(["--dfs-root", str(dfs), "models", "export", f"{name}:1", "--format",
                 "mlflow"]) == 0
    src = versions.load_version(dfs, name, 1)
    features = src.manifest.features
    rng = np.random.default_rng(3)
    records = [{f: float(v) for f, v in zip(features, row, strict=True)}
               for row in rng.normal(0, 2, (25, len(features)))]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, want, err = _predict_apart(dfs, f"{name}:1", str(rows))
    assert code == 0 and len(want) == len(records), err
    python = mlflow_python()
    assert python is not None
    done = subprocess.run([str(python), str(Path(__file__).with_name(
        "mlflow_pyfunc_predict.py")), mlflow_server.url, f"models:/{name}/1", str(rows)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.asarray(json.loads(done.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(got, [w["scores"] for w in want], atol=1e-4, rtol=0)
