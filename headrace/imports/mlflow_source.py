"""An MLflow model URI resolved to local files for the file importer: the registry (or the
run) asked where the model's artifacts are, the artifacts downloaded, the MLmodel file read.

``models:/NAME/VERSION`` and ``models:/NAME@ALIAS`` ask the registry for the version and its
download URI; ``runs:/RUN_ID/PATH`` asks for the run's artifact root, and (MLflow 3 keeps a
model logged in a run as a *logged model* beside the run) the logged model of that run named
PATH where the run's own artifacts hold no model there. Artifacts are fetched through the
server's artifact proxy (``mlflow-artifacts:``) or read from a local path (``file:``).

What comes back (:class:`ResolvedSource`) is the smallest interface the file importer needs:
a local path, its format, the signature's inputs, class labels where the model states them and
the lineage the version's manifest records.
"""

from __future__ import annotations

import shutil
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.imports import mlflow_model
from headrace.imports.mlflow_rest import MlflowClient, MlflowRefused, proxied_path
from headrace.imports.mlflow_uri import MlflowUri, parse
from headrace.store.signature import ModelInput


@dataclass(frozen=True)
class ResolvedSource:
    path: Path  # the model's file (or directory) on the local filesystem
    format: str  # onnx | xgboost | lightgbm | sklearn | skops | torchscript | keras | headrace
    inputs: tuple[ModelInput, ...]  # from the source's signature; empty: none stated
    labels: tuple[str, ...] = ()  # class labels the source states
    lineage: dict[str, str] = field(default_factory=dict)  # recorded in the manifest
    model_dir: Path | None = None  # the whole downloaded MLflow model
    details: dict[str, Any] = field(default_factory=dict)  # model_class, skops_trusted_types


def resolve(source: str, *, tracking_uri: str | None, dest: Path) -> ResolvedSource:
    """Download the model ``source`` names into ``dest`` (an empty directory) and read it."""
    if not tracking_uri:
        raise ValidationFailed(f"{source}: set MLFLOW_TRACKING_URI (or "
                               f"HEADRACE_MLFLOW_TRACKING_URI) to the tracking server")
    uri = parse(source)
    client = MlflowClient.at(tracking_uri)
    lineage = {"source": source, "mlflow_tracking_uri": tracking_uri}
    if uri.name:
        artifact_uri = _registered(client, uri, lineage)
    else:
        artifact_uri = _run_model(client, uri, lineage)
    model_dir = dest / "model"
    fetch_artifacts(client, artifact_uri, model_dir, where=source)
    model = mlflow_model.read(model_dir, where=source)
    lineage["mlflow_flavor"] = model.flavor
    return ResolvedSource(path=model.model_file, format=model.format, inputs=model.inputs,
                          labels=model.labels, lineage=lineage, model_dir=model_dir,
                          details=model.meta)


def _registered(client: MlflowClient, uri: MlflowUri, lineage: dict[str, str]) -> str:
    try:
        if uri.alias:
            mv = client.get("registered-models/alias", name=uri.name, alias=uri.alias)
        else:
            mv = client.get("model-versions/get", name=uri.name, version=uri.version)
    except MlflowRefused as exc:
        if exc.code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            what = f"alias {uri.alias!r}" if uri.alias else f"version {uri.version}"
            raise ValidationFailed(f"{uri.uri}: the registry has no {what} of model "
                                   f"{uri.name!r}") from None
        raise
    version = mv.get("model_version") or {}
    number = str(version.get("version", uri.version))
    lineage.update(mlflow_model_name=uri.name, mlflow_model_version=number,
                   mlflow_run_id=str(version.get("run_id") or ""),
                   mlflow_source=str(version.get("source") or ""))
    if uri.alias:
        lineage["mlflow_alias"] = uri.alias
    if version.get("model_id"):
        lineage["mlflow_model_id"] = str(version["model_id"])
    got = client.get("model-versions/get-download-uri", name=uri.name, version=number)
    artifact_uri = str(got.get("artifact_uri") or "")
    if not artifact_uri:
        raise ValidationFailed(f"{uri.uri}: the registry gives no download URI for "
                               f"{uri.name} version {number}")
    return artifact_uri


def _run_model(client: MlflowClient, uri: MlflowUri, lineage: dict[str, str]) -> str:
    try:
        run = client.get("runs/get", run_id=uri.run_id)["run"]
    except MlflowRefused as exc:
        if exc.code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise ValidationFailed(f"{uri.uri}: the tracking server has no run "
                                   f"{uri.run_id}") from None
        raise
    info: dict[str, Any] = run.get("info") or {}
    lineage["mlflow_run_id"] = uri.run_id
    in_run = f"{str(info.get('artifact_uri', '')).rstrip('/')}/{uri.path}"
    if _has_mlmodel(client, in_run):
        return in_run
    # MLflow 3: log_model(name=PATH) in a run makes a logged model whose source run is it.
    found = client.post("logged-models/search", {
        "experiment_ids": [str(info.get("experiment_id", "0"))],
        "filter": f"source_run_id = '{uri.run_id}' AND name = '{uri.path}'",
        "max_results": 1})
    models = found.get("models") or []
    if not models:
        raise ValidationFailed(f"{uri.uri}: run {uri.run_id} has no model at {uri.path!r}")
    mi = models[0].get("info") or {}
    lineage["mlflow_model_id"] = str(mi.get("model_id", ""))
    return str(mi.get("artifact_uri", ""))


def _has_mlmodel(client: MlflowClient, artifact_uri: str) -> bool:
    local = _local_path(artifact_uri)
    if local is not None:
        return (local / mlflow_model.MLMODEL).is_file()
    proxied = proxied_path(artifact_uri)
    if proxied is None:
        return False
    return any(str(f.get("path", "")).rsplit("/", 1)[-1] == mlflow_model.MLMODEL
               for f in client.list_artifacts(proxied))


def _local_path(artifact_uri: str) -> Path | None:
    parsed = urllib.parse.urlparse(artifact_uri)
    if parsed.scheme == "file":
        return Path(urllib.parse.unquote(parsed.path))
    if parsed.scheme == "" and artifact_uri.startswith("/"):
        return Path(artifact_uri)
    return None


def fetch_artifacts(client: MlflowClient, artifact_uri: str, dest: Path, *, where: str) -> None:
    """Every file under ``artifact_uri`` into ``dest``."""
    local = _local_path(artifact_uri)
    if local is not None:
        if not local.is_dir():
            raise ValidationFailed(f"{where}: its artifacts {artifact_uri} are not a directory "
                                   f"this machine can read")
        shutil.copytree(local, dest)
        return
    proxied = proxied_path(artifact_uri)
    if proxied is None:
        raise ValidationFailed(f"{where}: artifacts at {artifact_uri} are not reachable from "
                               f"here (Headrace reads mlflow-artifacts: through the tracking "
                               f"server, and local paths)")
    dest.mkdir(parents=True, exist_ok=True)
    files = list(client.walk(proxied))
    if not files:
        raise ValidationFailed(f"{where}: no artifacts at {artifact_uri}")
    for rel in files:
        target = (dest / rel).resolve()
        if not target.is_relative_to(dest.resolve()):
            raise ValidationFailed(f"{where}: artifact path {rel!r} leaves its directory")
        client.download(f"{proxied}/{rel}", target)
