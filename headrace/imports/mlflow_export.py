"""``headrace models export NAME:V --format mlflow``, and the way back for what it wrote:
``models:/NAME/N`` of a Headrace-flavored MLflow model publishes the very same version files
(every sha256 checked against the manifest that travelled with them) as a new version, with
lineage back to MLflow.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from headrace.core.errors import ValidationFailed
from headrace.imports import mlflow_logging
from headrace.imports.mlflow_model import HEADRACE_FLAVOR
from headrace.imports.mlflow_rest import MlflowClient
from headrace.imports.mlflow_source import ResolvedSource, resolve
from headrace.store import versions
from headrace.store.versions import IntegrityError, ModelVersion

DEFAULT_EXPERIMENT = "headrace"


@dataclass(frozen=True)
class MlflowSettings:
    """Read once by the CLI: ``HEADRACE_MLFLOW_TRACKING_URI``, else ``MLFLOW_TRACKING_URI``."""

    tracking_uri: str | None
    experiment: str = DEFAULT_EXPERIMENT

    @classmethod
    def from_env(cls, env: dict[str, str]) -> MlflowSettings:
        uri = env.get("HEADRACE_MLFLOW_TRACKING_URI") or env.get("MLFLOW_TRACKING_URI") or None
        return cls(uri, env.get("HEADRACE_MLFLOW_EXPERIMENT") or DEFAULT_EXPERIMENT)

    def client(self) -> MlflowClient:
        if not self.tracking_uri:
            raise ValidationFailed("set HEADRACE_MLFLOW_TRACKING_URI (or MLFLOW_TRACKING_URI) "
                                   "to the MLflow tracking server")
        return MlflowClient.at(self.tracking_uri)


def export(*, root: Path, ref: str, settings: MlflowSettings) -> mlflow_logging.Logged:
    """Log version ``ref`` (NAME:V, NAME, NAME@ALIAS) to MLflow and register it."""
    client = settings.client()
    mv = versions.resolve(root, ref)  # every file's sha256 verified before it leaves
    return mlflow_logging.export_version(client, mv, experiment=settings.experiment)


def publish_headrace_flavor(*, root: Path, source: ResolvedSource, name: str) -> ModelVersion:
    """Publish a Headrace-flavored MLflow model's version files as version N+1 of ``name``."""
    if source.format != HEADRACE_FLAVOR:
        raise ValidationFailed(f"{source.lineage.get('source')} is a {source.format} model: "
                               f"the file importer imports it")
    manifest, _ = versions.read_manifest(source.path)
    try:
        versions.verify_files(source.path, manifest)
    except IntegrityError as exc:
        raise IntegrityError(f"{source.lineage.get('source')}: {exc}") from None
    extra = {**manifest.extra, "imported": {
        **source.lineage, "from_version": f"{manifest.name}:{manifest.version}"}}
    fresh = manifest.model_copy(update={"name": name, "version": 0, "files": {},
                                        "extra": extra, "job_id": None,
                                        "trigger_event_id": None})

    def write_files(d: Path) -> None:
        for rel in manifest.files:
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source.path / rel, d / rel)

    return versions.publish(root, fresh, write_files)


def import_version(*, root: Path, source: str, name: str, settings: MlflowSettings
                   ) -> ModelVersion:
    """``models:/...`` or ``runs:/...`` of a Headrace-flavored model into the store."""
    with tempfile.TemporaryDirectory(prefix="headrace-mlflow-") as tmp:
        resolved = resolve(source, tracking_uri=settings.tracking_uri, dest=Path(tmp))
        return publish_headrace_flavor(root=root, source=resolved, name=name)

