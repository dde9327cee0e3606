"""CLI fixtures: a private broker state file (as `headrace broker` writes it)."""

from __future__ import annotations

import json
import os
import selectors
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest


@pytest.fixture
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """XDG dirs of this test only, and no HEADRACE_ settings from the caller's shell."""
    for k in list(os.environ):
        if k.startswith("HEADRACE_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path / "state" / "headrace" / "broker.json"


@pytest.fixture
def running_broker_recorded(private_state: Path) -> Callable[[str], Path]:
    """Record ``bootstrap`` in the state file as a live `headrace broker` (this process)."""

    def record(bootstrap: str) -> Path:
        private_state.parent.mkdir(parents=True, exist_ok=True)
        private_state.write_text(json.dumps({"bootstrap": bootstrap, "pid": os.getpid()}))
        return private_state

    return record


def lines_until(stream: IO[str], done: Callable[[list[str]], bool], *,
                timeout_s: float = 60.0) -> list[str]:
    """Read a child's output lines until ``done(lines)`` or EOF or the timeout."""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not done(seen):
        if sel.select(timeout=1):
            line = stream.readline()
            if not line:
                break
            seen.append(line.rstrip("\n"))
    return seen
