"""Running ``headrace models import`` and ``headrace predict`` as a user does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.cli import main
from headrace.scorers import adapters
from tests.imports import elsewhere


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def import_file(capsys: pytest.CaptureFixture[str], dfs: Path, path: Path, name: str,
                *extra: str, bootstrap: str | None = None) -> tuple[int, str, str]:
    head = ["--bootstrap", bootstrap] if bootstrap else []
    return cli(capsys, *head, "--dfs-root", str(dfs), "models", "import", str(path), "--name",
               name, *extra)


def predict(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dfs: Path,
            ref: str, rows: Path) -> list[dict[str, Any]]:
    monkeypatch.setattr(adapters, "_chosen", [])  # a process of its own
    code, out, err = cli(capsys, "--dfs-root", str(dfs), "predict", ref, str(rows), "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def build(fmt: str, tmp: Path, x: np.ndarray, y: np.ndarray) -> tuple[Path, list[str]]:
    """The format's file and what its import needs declared."""
    filename, make = elsewhere.MAKERS[fmt]
    path = make(tmp / filename, x, y)
    declared = list(elsewhere.DECLARED.get(fmt, []))
    if fmt in ("torchscript", "torch.export", "keras"):  # they name no classes
        declared += ["--labels", ",".join(str(c) for c in range(int(y.max()) + 1))]
    return path, declared
