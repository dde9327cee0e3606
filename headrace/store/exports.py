"""Where a published version's exports live, and reading one back verified.

An export sits beside its version, ``models/<name>/<version>/exports/<format>/``: the exported
file and ``export.json`` (its sha256, what it was checked against and how it is fed). The
version's manifest is not rewritten: its sha256 is the version's identity in the lineage index
and the scorers' metrics. ``headrace models export`` writes it; the onnxruntime scorer runtime
reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.store.dfs import sha256_file
from headrace.store.versions import IntegrityError

EXPORTS = "exports"
RECORD = "export.json"


@dataclass(frozen=True)
class Export:
    path: Path  # the exported file, its sha256 checked against the record
    record: dict[str, Any]


def export_dir(version_path: Path, fmt: str) -> Path:
    return version_path / EXPORTS / fmt


def read_export(version_path: Path, fmt: str) -> Export | None:
    """The version's ``fmt`` export, verified; None when it has none. ``IntegrityError`` when
    its file does not match the record's sha256 (or the record is unreadable)."""
    where = export_dir(version_path, fmt)
    try:
        raw = (where / RECORD).read_text()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(raw)
        path = where / str(record["file"])
        want = str(record["sha256"])
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"{where / RECORD} is not a valid export record: {exc}") from None
    try:
        got = sha256_file(path)
    except FileNotFoundError:
        raise IntegrityError(f"{path} is missing (its export record names it)") from None
    if got != want:
        raise IntegrityError(f"{path} has sha256 {got[:12]}…, its export record says "
                             f"{want[:12]}…")
    return Export(path=path, record=record)
