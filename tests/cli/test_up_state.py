"""`headrace up` records its embedded broker like `headrace broker` does, so short commands in
another terminal find it, and prints the `export HEADRACE_BOOTSTRAP=...` line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.cli import main
from tests.cli.conftest import lines_until

CLI = [sys.executable, "-c", "import sys; from headrace.cli import main; sys.exit(main())"]


def _up(dfs: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "--dfs-root", str(dfs), "up", "--dashboard-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def _until_dashboard(proc: subprocess.Popen[str]) -> list[str]:
    try:
        assert proc.stdout is not None
        return lines_until(proc.stdout, lambda ls: any("● dashboard" in s for s in ls))
    except BaseException:
        proc.kill()
        raise


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(60)
    finally:
        proc.kill()


def test_up_writes_the_broker_state_file_and_prints_the_export_line(
        private_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = _up(tmp_path / "dfs")
    try:
        seen = _until_dashboard(proc)
        state = json.loads(private_state.read_text())
        assert state["pid"] == proc.pid
        exports = [s.strip() for s in seen if "export HEADRACE_BOOTSTRAP=" in s]
        assert exports == [f"export HEADRACE_BOOTSTRAP={state['bootstrap']}"], seen
        # A short command with nothing named finds up's broker through the state file.
        capsys.readouterr()
        assert main(["topics"]) == 0
        assert f"using the broker at {state['bootstrap']}" in capsys.readouterr().err
    finally:
        code = _stop(proc)
    assert code == 0
    assert not private_state.exists()  # removed when up stops, as `headrace broker` does


def test_up_leaves_the_state_file_of_a_running_headrace_broker_alone(
        running_broker_recorded: Callable[[str], Path], tmp_path: Path) -> None:
    state = running_broker_recorded("127.0.0.1:1")  # this test process plays the broker
    before = state.read_bytes()
    proc = _up(tmp_path / "dfs")
    try:
        seen = _until_dashboard(proc)
        assert state.read_bytes() == before
        assert any("short commands keep using the `headrace broker`" in s for s in seen), seen
        assert any("export HEADRACE_BOOTSTRAP=" in s for s in seen), seen
    finally:
        _stop(proc)
    assert state.read_bytes() == before
