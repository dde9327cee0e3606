"""Import test fixtures: a private state directory (no broker discovered from this machine),
the stream fixtures of the scorer tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.scorers.conftest import data, stream

__all__ = ["data", "stream"]


@pytest.fixture(autouse=True)
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No HEADRACE_ settings from the caller's shell and no `headrace broker` state file to
    discover: a test talks only to the broker it was given."""
    for k in list(os.environ):
        if k.startswith("HEADRACE_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
