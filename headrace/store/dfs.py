"""Paths on the shared filesystem, confined to its root."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from headrace.core.errors import PermanentError, ValidationFailed
from headrace.core.naming import check_name, confined

CHUNK = 1 << 20


def model_dir(root: Path, name: str) -> Path:
    return confined(root, "models", check_name(name, what="model name"))


def jobs_dir(root: Path) -> Path:
    return root / "jobs"


def job_dir(root: Path, job_id: str) -> Path:
    return confined(root, "jobs", check_name(job_id, what="job id"))


def resolve_dataset(root: Path, uri: str) -> Path | str:
    """A DFS dataset URI to a local path under ``root``; object-store URIs pass through."""
    if "://" in uri and not uri.startswith("dfs://"):
        if any(c in uri.split("://", 1)[1] for c in "?#@"):  # no endpoint override, no secrets
            raise ValidationFailed(f"dataset URI {uri!r} must not carry a query, fragment or "
                                   "credentials")
        return uri
    rel = uri.removeprefix("dfs://")
    if not rel or rel.startswith("/") or ".." in rel.split("/"):
        raise ValidationFailed(f"dataset URI {uri!r} must be a path relative to the DFS root")
    path = confined(root, rel)
    if not path.exists():
        raise PermanentError(f"dataset {uri!r} does not exist under the DFS root")
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a sibling temp file, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
