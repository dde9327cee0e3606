"""`./dev`: its help is the comment at its top (no shell), and relative paths given to it
resolve against the caller's directory. A stub ``.venv`` stands in for the installed one, so
these run in a second (the real install is what `./dev test` itself exercises)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_dev_help_prints_the_usage_and_no_shell(tmp_path: Path) -> None:
    proc = subprocess.run([str(REPO / "dev"), "--help"], capture_output=True, text=True,
                          timeout=30, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "./dev demo" in proc.stdout and "./dev test" in proc.stdout
    assert "set -euo" not in proc.stdout and "#" not in proc.stdout


def test_relative_paths_given_to_dev_resolve_against_the_callers_directory(
        tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(REPO / "dev", checkout / "dev")
    shutil.copy(REPO / "pyproject.toml", checkout / "pyproject.toml")
    bin_dir = checkout / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (bin_dir / "headrace").write_text('#!/bin/sh\necho "cwd=$(pwd)"; echo "args=$*"\n')
    (bin_dir / "headrace").chmod(0o755)
    digest = hashlib.sha256((checkout / "pyproject.toml").read_bytes()).hexdigest()
    # What `dev`'s setup stamps after installing the `dev` extra: nothing to install again.
    (checkout / ".venv" / ".headrace-installed").write_text(f"{digest} dev\n")
    caller = tmp_path / "elsewhere"
    caller.mkdir()
    (caller / "some.jsonl").write_text("{}\n")

    proc = subprocess.run([str(checkout / "dev"), "send", "demo", "some.jsonl"],
                          capture_output=True, text=True, timeout=30, check=False, cwd=caller)
    assert proc.returncode == 0, proc.stderr
    assert f"cwd={caller}" in proc.stdout and "args=send demo some.jsonl" in proc.stdout
