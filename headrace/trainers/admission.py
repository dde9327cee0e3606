"""Admission of a training request where it enters (the control plane, ``headrace train``):
the operator caps, and a named code package registered, intact and holding its entrypoint
(checked statically: nothing of the package runs outside the job process). A refused request
raises ``ValidationFailed`` with one line (the control plane dead-letters it): no job, no
process."""

from __future__ import annotations

from pathlib import Path

from headrace.contracts import CodeRef, TrainRequested
from headrace.store import code
from headrace.store.dfs import resolve_dataset
from headrace.trainers import limits


def admit(req: TrainRequested, *, root: Path, caps: limits.RequestCaps,
          check_code: bool = True) -> None:
    limits.check_request(req, caps)
    if check_code and isinstance(req.spec.model, CodeRef):
        _, files = code.verify(root, req.spec.model.code)
        code.check_entrypoint(files, req.spec.model)
    local = resolve_dataset(root, req.dataset_uri) if _on_dfs(root, req.dataset_uri) else None
    if isinstance(local, Path):  # object stores are sized by the job (no network here)
        limits.check_dataset_size(root, req.dataset_uri, caps)


def _on_dfs(root: Path, uri: str) -> bool:
    if "://" in uri and not uri.startswith("dfs://"):
        return False
    return (root / uri.removeprefix("dfs://")).exists()
