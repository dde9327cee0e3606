"""A global option given after the command says where it goes; a role library whose extra is
not installed is named with the extra to install (tools/check_wheel.sh runs that for real)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.cli._extras import EXTRA_OF, missing_extra

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("args", "moved"), [
    (["score", "demo", "--bootstrap", "127.0.0.1:1"],
     "headrace --bootstrap 127.0.0.1:1 score demo"),
    (["jobs", "list", "--dfs-root=/tmp/x"], "headrace --dfs-root=/tmp/x jobs list"),
])
def test_a_global_option_after_the_command_gets_the_line_with_it_moved(
        args: list[str], moved: str, capsys: pytest.CaptureFixture[str],
        private_state: Path) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headrace: No such option:")
    assert err[0].endswith(f"; global options go before the command: {moved}")


def test_an_unknown_option_of_the_command_gets_no_global_hint(
        capsys: pytest.CaptureFixture[str], private_state: Path) -> None:
    assert main(["score", "demo", "--nope"]) == 2
    assert "global options" not in capsys.readouterr().err


def test_every_extra_named_for_a_missing_library_exists_and_is_said_in_one_line() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(EXTRA_OF.values()) <= set(extras)
    line = missing_extra(ModuleNotFoundError("No module named 'croniter'", name="croniter"))
    assert line == ("this command needs croniter, which the 'control' extra installs: "
                    "pip install 'headrace[control]' (or 'headrace[all]')")
    assert missing_extra(ModuleNotFoundError("x", name="not_a_role_library")) is None
