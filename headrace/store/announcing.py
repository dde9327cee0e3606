"""The ``ModelPublished`` event that announces where an alias now points: built from the stored
version, so the trainers (promote, rollback) and the scorers (a canary's promotion or rollback)
announce alike."""

from __future__ import annotations

from pathlib import Path

from headrace.contracts import ModelAction, ModelPublished
from headrace.store.versions import PRODUCTION, ModelVersion


def announcement(root: Path, mv: ModelVersion, *, previous: int | None,
                 action: ModelAction = ModelAction.PROMOTED, job_id: str | None = None,
                 reason: str | None = None) -> ModelPublished:
    return ModelPublished(
        model_name=mv.name, version=mv.version, framework=mv.manifest.framework,
        task=mv.manifest.task, alias=PRODUCTION, path=str(mv.path.relative_to(root)),
        manifest_sha256=mv.manifest_sha256,
        metrics={k: float(v) for k, v in mv.manifest.metrics.items()},
        previous_version=previous, action=action, job_id=job_id, reason=reason)
