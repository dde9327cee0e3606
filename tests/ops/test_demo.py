"""`headrace demo` end to end: broker, control plane, TF training, live scoring, MXNet swap,
and an image model (digits) trained and scored on its own stream."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.cli import app
from headrace.streams.broker import EmbeddedBroker
from headrace.trainers.datasets import make_demo
from tests.cli.conftest import lines_until


def _commands() -> set[str]:
    names = {c.name for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups if g.name}
    return names


def _line(out: str, label: str) -> str:
    """What the summary prints after ``label``."""
    m = re.search(rf"^\s*{label}\s+(.+)$", out, re.MULTILINE)
    assert m, out[-2000:]
    return m.group(1).strip()


NEEDED = {"control", "score", "datasets"}


def test_the_cli_has_every_command_the_demo_drives() -> None:
    # A missing CLI module must fail here, not skip the demo test below.
    assert _commands() >= NEEDED, f"missing CLI commands: {sorted(NEEDED - _commands())}"


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path, with the sha256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_demo_on_a_named_broker_leaves_the_users_control_plane_and_dfs_alone(
        tmp_path: Path) -> None:
    # The user's stack as docs/training.md sets it up: HEADRACE_BOOTSTRAP exported, and
    # `headrace control` on that broker with the user's DFS (which holds a dataset called
    # demo.parquet, like the demo's). The demo must not hand its requests to that control
    # plane: the user's DFS stays byte for byte the same.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADRACE_")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"),
               TF_CPP_MIN_LOG_LEVEL="3")
    users_dfs = tmp_path / "users-dfs"
    make_demo(out=users_dfs / "datasets" / "demo.parquet", rows=200, seed=3)
    before = _tree(users_dfs)
    cli = [sys.executable, "-c", "import sys; from headrace.cli import main; sys.exit(main())"]
    with EmbeddedBroker() as users_broker:
        env["HEADRACE_BOOTSTRAP"] = users_broker.bootstrap
        control = subprocess.Popen([*cli, "--dfs-root", str(users_dfs), "control"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert control.stdout is not None
            ready = lines_until(control.stdout, lambda ls: any("control plane:" in s for s in ls))
            assert any("listening to events.train-requests" in s for s in ready), ready
            proc = subprocess.run([*cli, "demo", "--records", "400", "--epochs", "2"],
                                  env=env, capture_output=True, text=True, timeout=420,
                                  check=False)
            assert control.poll() is None  # the user's control plane ran all along
        finally:
            control.terminate()
            control.wait(30)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    first = out.splitlines()[:2]
    assert first[0] == f"broker: {users_broker.bootstrap} (from HEADRACE_BOOTSTRAP)", out[:500]
    assert first[1].startswith("DFS: a scratch directory"), out[:500]
    own = re.search(r"its own topics there: (headrace-demo-[0-9a-f]{6})\.events\.\*", out)
    assert own, out[:2000]
    assert _tree(users_dfs) == before
    assert "predictions out" in out and "model versions" in out
    assert "(tensorflow)" in out and "(mxnet)" in out
    assert "published digits:" in out, out[-2000:]  # the image model (cnn on digit PNGs)
    # One prediction a record; the tally by version (what the demo's follower saw) counts none
    # twice (a new follower on Tansu re-reads part of the last batch) and stops once the topic
    # holds them all, so it may trail by what arrived last.
    records, preds = int(_line(out, "records in")), int(_line(out, "predictions out"))
    counts = [int(n) for n in re.findall(r"v\d+: (\d+)", _line(out, "predictions by"))]
    assert records == preds and len(counts) == 2 and 0 < sum(counts) <= preds, out[-2000:]
    # The image stream: every held-out digit has exactly one prediction on predictions.digits
    # (the demo reads them back by key from the topic, on its own memory-only broker, which is
    # gone when it exits), all by the published digits model, and most of them right.
    images = int(_line(out, "images in").split()[0])
    predicted, by = _line(out, "image predictions").split(maxsplit=1)
    assert images >= 250 and int(predicted) == images, out[-2000:]
    assert re.fullmatch(r"by digits:\d+", by), by
    assert int(_line(out, "image dead letters")) == 0, out[-2000:]
    accuracy, tally = _line(out, "image accuracy").split(maxsplit=1)
    m = re.fullmatch(r"\((\d+)/(\d+) against the known labels\)", tally)
    assert m and int(m.group(2)) == images, tally
    assert float(accuracy) == pytest.approx(int(m.group(1)) / images, abs=1e-3)
    assert float(accuracy) >= 0.85, out[-2000:]  # a cnn on held-out digits: ~0.95 and up
