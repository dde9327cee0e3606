"""Where an imported model comes from: a local file or folder and its lineage.

A resolver turns what the user named (a path here; ``models:/`` and ``runs:/`` URIs in the
MLflow resolver) into an ``ImportSource``; everything after it is shared. ``lineage`` is
recorded as it is in the version's manifest (``extra.import.source``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.core.errors import ValidationFailed
from headrace.store.dfs import sha256_file


@dataclass(frozen=True)
class ImportSource:
    path: Path  # a local file or folder the format's importer reads
    uri: str  # what the user named
    lineage: dict[str, Any] = field(default_factory=dict)
    # The importer to use (an MLflow flavour knows its format); None: found from the path.
    format: str | None = None


def fingerprint(path: Path) -> str:
    """sha256 of a file; of a folder, over its files' relative names and sha256s."""
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + sha256_file(f).encode())
    return h.hexdigest()


def from_file(path: Path) -> ImportSource:
    """A model file (or folder) on this machine; its lineage is its sha256."""
    if not path.exists():
        raise ValidationFailed(f"{path}: no such file or folder")
    resolved = path.resolve()
    return ImportSource(path=resolved, uri=str(resolved),
                        lineage={"kind": "file", "path": str(resolved),
                                 "sha256": fingerprint(resolved)})


# URI scheme -> "module:function" resolving it to an ImportSource (imported when used). A path
# with no scheme is a file; the MLflow resolver adds ``models`` and ``runs`` here.
# One resolver per URI scheme, loaded when its scheme is asked for (MLflow's needs no import
# until then).
RESOLVERS: dict[str, str] = {
    "file": "headrace.imports.sources:from_file_uri",
    "models": "headrace.imports.mlflow_handoff:from_mlflow_uri",
    "runs": "headrace.imports.mlflow_handoff:from_mlflow_uri",
}


def from_file_uri(uri: str) -> ImportSource:
    return from_file(Path(uri.removeprefix("file://").removeprefix("file:")))


def resolve(uri: str) -> ImportSource:
    """What the user named, as a local file or folder and its lineage."""
    import importlib
    import re

    scheme = re.match(r"^([a-z][a-z0-9+.-]*):/", uri)
    if scheme is None:
        return from_file(Path(uri))
    target = RESOLVERS.get(scheme.group(1))
    if target is None:
        others = [s + ":/" for s in RESOLVERS if s != "file"]
        raise ValidationFailed(f"{uri}: no {scheme.group(1)}:/ source; Headrace imports "
                               f"models from files{''.join(', ' + o for o in others)}")
    module, _, function = target.partition(":")
    found: ImportSource = getattr(importlib.import_module(module), function)(uri)
    return found
