"""A published Headrace version logged to MLflow as an MLflow model, and registered.

The model directory holds the version's files verbatim under ``version/`` (its manifest, so
every file's sha256 travels with it) and an ``MLmodel`` file with its signature (the
manifest's inputs as MLflow column or tensor specs) and these flavors:

* ``headrace``: the version itself; ``mlflow_export.import_version`` of its ``models:/`` URI
  publishes the very same files (same sha256) with lineage back to MLflow;
* ``onnx`` and ``python_function`` (loader ``mlflow.onnx``) where the version is or has an ONNX
  model (an imported ONNX version, or ``headrace models export NAME:V --format onnx``), over a
  copy of it at the model's root (where MLflow's loader reads it): then MLflow's own
  ``mlflow.pyfunc.load_model`` serves it.

Registered under the version's model name with the tags ``headrace.version`` and
``headrace.manifest_sha256``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.imports import mlflow_model
from headrace.imports.mlflow_rest import MlflowClient, MlflowRefused, proxied_path
from headrace.store import versions
from headrace.store.exports import read_export
from headrace.store.manifest import MANIFEST

MODEL_PATH = "model"  # under the run's artifacts
VERSION_DIR = "version"
IMPORTED_ONNX = "model.onnx"  # an imported ONNX version's file
ONNX_FILE = "model.onnx"  # the onnx flavor's copy, at the MLflow model's root
TAG_VERSION = "headrace.version"
TAG_SHA = "headrace.manifest_sha256"


@dataclass(frozen=True)
class Logged:
    run_id: str
    model_uri: str  # the model's artifact URI
    registered: str  # NAME, and
    registry_version: str  # its MLflow registry version


def now_ms() -> int:
    return int(time.time() * 1000)


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created if missing."""
    try:
        got = client.get("experiments/get-by-name", experiment_name=name)
        return str(got["experiment"]["experiment_id"])
    except MlflowRefused as exc:
        if exc.code != "RESOURCE_DOES_NOT_EXIST":
            raise
    try:
        return str(client.post("experiments/create", {"name": name})["experiment_id"])
    except MlflowRefused as exc:  # created meanwhile by another job
        if exc.code != "RESOURCE_ALREADY_EXISTS":
            raise
        got = client.get("experiments/get-by-name", experiment_name=name)
        return str(got["experiment"]["experiment_id"])


def proxied(artifact_uri: str) -> str:
    """The artifact proxy's path of a run's ``mlflow-artifacts:`` root."""
    path = proxied_path(artifact_uri)
    if path is None:
        raise MlflowRefused(f"the run's artifacts live at {artifact_uri}: Headrace writes "
                            f"artifacts through the server's proxy (start it with "
                            f"--artifacts-destination)")
    return path


def build_model_dir(mv: versions.ModelVersion, dest: Path, *, run_id: str) -> Path:
    """The MLflow model directory of version ``mv`` under ``dest``."""
    m = mv.manifest
    model = dest / MODEL_PATH
    (model / VERSION_DIR).mkdir(parents=True)
    for rel in (*m.files, MANIFEST):
        target = model / VERSION_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(mv.path / rel, target)
    flavors: dict[str, dict[str, Any]] = {mlflow_model.HEADRACE_FLAVOR: {
        "data": VERSION_DIR, "name": m.name, "version": m.version,
        "framework": m.framework.value, "manifest_sha256": mv.manifest_sha256}}
    onnx = _onnx_file(mv)
    if onnx is not None:  # MLflow's onnx loader reads the file beside MLmodel: a copy there
        shutil.copy2(mv.path / onnx, model / ONNX_FILE)
        flavors["onnx"] = {"data": ONNX_FILE, "providers": ["CPUExecutionProvider"]}
        flavors["python_function"] = {"loader_module": "mlflow.onnx", "data": ONNX_FILE}
    mlflow_model.write(model, flavors=flavors, inputs=m.input_signature(), run_id=run_id,
                       metadata={"classes": list(m.classes), "task": m.task.value,
                                 "headrace": f"{m.name}:{m.version}"})
    return model


def _onnx_file(mv: versions.ModelVersion) -> str | None:
    if (mv.path / IMPORTED_ONNX).is_file() and IMPORTED_ONNX in mv.manifest.files:
        return IMPORTED_ONNX
    found = read_export(mv.path, "onnx")
    return None if found is None else str(found.path.relative_to(mv.path))


def log_version(client: MlflowClient, mv: versions.ModelVersion, *, run_id: str,
                artifact_uri: str) -> str:
    """Upload the version as an MLflow model into run ``run_id``; its artifact URI."""
    root = proxied(artifact_uri)
    with tempfile.TemporaryDirectory(prefix="headrace-mlflow-") as tmp:
        model = build_model_dir(mv, Path(tmp), run_id=run_id)
        for f in sorted(p for p in model.rglob("*") if p.is_file()):
            client.upload(f, f"{root}/{MODEL_PATH}/{f.relative_to(model).as_posix()}")
    return f"{artifact_uri.rstrip('/')}/{MODEL_PATH}"


def register(client: MlflowClient, mv: versions.ModelVersion, *, model_uri: str, run_id: str
             ) -> str:
    """Register the logged model under the version's name; the registry's version number."""
    try:
        client.post("registered-models/create", {"name": mv.name})
    except MlflowRefused as exc:
        if exc.code != "RESOURCE_ALREADY_EXISTS":
            raise
    got = client.post("model-versions/create", {
        "name": mv.name, "source": model_uri, "run_id": run_id,
        "tags": [{"key": TAG_VERSION, "value": str(mv.version)},
                 {"key": TAG_SHA, "value": mv.manifest_sha256}],
        "description": f"Headrace {mv.name}:{mv.version}"})
    return str(got["model_version"]["version"])


def create_run(client: MlflowClient, *, experiment: str, name: str,
               tags: dict[str, str]) -> tuple[str, str]:
    """A new run; (run id, artifact URI)."""
    run = client.post("runs/create", {
        "experiment_id": experiment_id(client, experiment), "run_name": name,
        "start_time": now_ms(), "tags": [{"key": k, "value": v} for k, v in tags.items()]})
    info = run["run"]["info"]
    return str(info["run_id"]), str(info["artifact_uri"])


def end_run(client: MlflowClient, run_id: str, status: str = "FINISHED") -> None:
    client.post("runs/update", {"run_id": run_id, "status": status, "end_time": now_ms()})


def export_version(client: MlflowClient, mv: versions.ModelVersion, *,
                   experiment: str) -> Logged:
    """``headrace models export NAME:V --format mlflow``: a run holding the version's metrics
    and the model, registered."""
    m = mv.manifest
    run_id, artifact_uri = create_run(client, experiment=experiment,
                                      name=f"{m.name}:{m.version}",
                                      tags={TAG_VERSION: str(m.version), "headrace.model": m.name,
                                            TAG_SHA: mv.manifest_sha256})
    try:
        metrics = [{"key": k, "value": float(v), "timestamp": now_ms(), "step": 0}
                   for k, v in sorted(m.metrics.items())]
        if metrics:
            client.post("runs/log-batch", {"run_id": run_id, "metrics": metrics[:1000]})
        model_uri = log_version(client, mv, run_id=run_id, artifact_uri=artifact_uri)
        number = register(client, mv, model_uri=model_uri, run_id=run_id)
    except BaseException:
        end_run(client, run_id, "FAILED")
        raise
    end_run(client, run_id)
    return Logged(run_id, model_uri, mv.name, number)
