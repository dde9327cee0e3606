"""Which broker and DFS a command uses: short client commands may use a discovered
`headrace broker` and say so in one line; long-running ones never attach to it silently."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.cli._context import CliContext, where


def test_a_client_command_says_in_one_line_that_it_uses_the_discovered_broker(
        broker: str, running_broker_recorded: Callable[[str], Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    state = running_broker_recorded(broker)
    assert main(["topics"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"headrace: using the broker at {broker}, the `headrace broker` "
                   f"(pid {os.getpid()}) recorded in {state}"]


@pytest.mark.parametrize("command", [["control"], ["score", "demo"]])
def test_control_and_score_refuse_a_discovered_broker_and_name_the_flag(
        broker: str, running_broker_recorded: Callable[[str], Path],
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    running_broker_recorded(broker)
    assert main(command) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not attach to a broker it discovered" in err
    assert f"--bootstrap {broker}" in err and f"HEADRACE_BOOTSTRAP={broker}" in err


@pytest.mark.parametrize("command", ["demo", "up"])
def test_demo_and_up_start_their_own_broker_and_say_which_they_ignore(
        broker: str, running_broker_recorded: Callable[[str], Path], command: str) -> None:
    running_broker_recorded(broker)
    w = where(CliContext(), command, own_broker=True, scratch_dfs=command == "demo")
    assert w.settings.bootstrap is None  # an embedded broker of its own
    lines = w.lines()
    assert lines[0].startswith("broker: an embedded one started by this command")
    assert lines[2].startswith(f"note: not using the broker at {broker}")
    if command == "demo":
        assert lines[1].startswith("DFS: a scratch directory") and not w.dfs_named
    else:
        assert "(the default;" in lines[1]


def test_a_named_broker_and_dfs_are_used_and_say_where_they_came_from(
        broker: str, running_broker_recorded: Callable[[str], Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    running_broker_recorded("127.0.0.1:1")
    monkeypatch.setenv("HEADRACE_BOOTSTRAP", broker)
    w = where(CliContext(dfs_root=tmp_path / "mine"), "demo", own_broker=True, scratch_dfs=True)
    assert w.settings.bootstrap == broker and w.dfs_named
    assert w.lines() == [f"broker: {broker} (from HEADRACE_BOOTSTRAP)",
                         f"DFS: {tmp_path / 'mine'} (from --dfs-root)"]


def test_commands_that_only_read_the_dfs_say_nothing_about_a_discovered_broker(
        broker: str, running_broker_recorded: Callable[[str], Path], dfs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    running_broker_recorded(broker)
    assert main(["--dfs-root", str(dfs), "jobs", "list"]) == 0
    assert main(["--dfs-root", str(dfs), "models", "list"]) == 0
    assert capsys.readouterr().err == ""
