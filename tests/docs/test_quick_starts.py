"""Run every command block of README.md's quick look and of docs/*.md's quick starts, as
written, against the test session's broker and a fresh DFS.

A runnable block is a fence tagged ``bash quick-start``. Each line is one command:

* ``./dev CMD ...`` and ``headrace CMD ...`` run through the CLI's own ``main`` (in this
  process), or as a child process when the line ends in ``&``;
* ``headrace broker`` lines are skipped: the session broker stands in for it, and an
  ``export HEADRACE_BOOTSTRAP=...`` points at it instead of the address in the docs;
* ``control`` and ``train`` get a private ``--topic-prefix`` (the session broker is shared);
* anything else (``printf``, ``cp``, ``mkdir``) runs in bash in the checkout.

Every command must exit 0. A reader who follows README.md and then docs/training.md in order,
on a broker of their own, gets every record they sent scored and none dead-lettered.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import Prediction, parse
from headrace.core.settings import load_settings
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.connection import connection_for
from tests.fixtures import eventually, read_all

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```bash quick-start\n(.*?)^```$", re.MULTILINE | re.DOTALL)
CLI = [sys.executable, "-c", "import sys; from headrace.cli import main; sys.exit(main())"]
PREFIXED = {"control", "train"}


def quick_starts() -> list[tuple[str, str]]:
    return [(f"{doc.name}#{i}", body) for doc in DOCS
            for i, body in enumerate(BLOCK.findall(doc.read_text()), start=1)]


class DocSession:
    def __init__(self, broker: str, env: dict[str, str], *, prefixed: bool = True) -> None:
        self.broker = broker
        self.env = env
        self.prefix = "q" + uuid.uuid4().hex[:8] if prefixed else ""
        self.background: list[subprocess.Popen[bytes]] = []

    def run(self, line: str) -> None:
        words = shlex.split(line, comments=True)
        if not words:
            return
        background = words[-1] == "&"
        words = [w for w in words if w != "&"]
        if words[0] in ("./dev", "headrace"):
            self._headrace(words[1:], background=background, line=line)
        elif words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = self.broker if name == "HEADRACE_BOOTSTRAP" else value
        else:
            proc = subprocess.run(["bash", "-c", line], cwd=REPO, env=self.env,
                                  capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 0, f"{line!r}: {proc.stderr}"

    def _headrace(self, args: list[str], *, background: bool, line: str) -> None:
        if args[:1] == ["broker"]:
            return
        args = [os.path.expandvars(a) for a in args]
        if args[:1] and args[0] in PREFIXED and self.prefix:
            args = [args[0], "--topic-prefix", self.prefix, *args[1:]]
        if background:
            self.background.append(subprocess.Popen(
                [*CLI, *args], cwd=REPO, env=self.env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
            return
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        cwd = os.getcwd()
        os.chdir(REPO)
        try:
            code = main(args)
        finally:
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(saved)
        assert code == 0, f"{line!r} exited {code}"

    def stop(self) -> None:
        for p in self.background:
            p.terminate()
        for p in self.background:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _env(broker: str, dfs: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADRACE_")}
    env.update(HEADRACE_BOOTSTRAP=broker, HEADRACE_DFS_ROOT=str(dfs),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"),
               TF_CPP_MIN_LOG_LEVEL="3", COLUMNS="100")
    return env


@pytest.fixture
def doc_session(broker: str, dfs: Path, tmp_path: Path) -> Iterator[DocSession]:
    s = DocSession(broker, _env(broker, dfs, tmp_path))
    try:
        yield s
    finally:
        s.stop()


def test_the_readme_and_every_doc_have_a_quick_start() -> None:
    names = {n.split("#")[0] for n, _ in quick_starts()}
    assert {"README.md", "training.md", "operations.md", "topology.md"} <= names, names


def _params() -> list[object]:
    # A block that trains a model takes ~30 s on 2 cores: slow, like the other training tests.
    return [pytest.param(where, body, id=where,
                         marks=[pytest.mark.slow] if "headrace train " in body else [])
            for where, body in quick_starts()]


@pytest.mark.parametrize(("where", "body"), _params())
def test_a_quick_start_runs_as_written(doc_session: DocSession, where: str, body: str) -> None:
    for line in body.splitlines():
        doc_session.run(line)


def test_user_docs_keep_benchmark_lab_notes_in_bench_results() -> None:
    scoring = (REPO / "docs" / "scoring.md").read_text()
    assert "bench/RESULTS.md" in scoring
    assert "runs 1-5" not in scoring and "2026-" not in scoring
    assert "runs 1-5" in (REPO / "bench" / "RESULTS.md").read_text()


@pytest.mark.slow
def test_the_readme_then_training_md_in_order_score_every_record_and_dead_letter_none(
        dfs: Path, tmp_path: Path) -> None:
    blocks = dict(quick_starts())
    with EmbeddedBroker() as own:  # the reader's own broker: data.demo holds only their records
        session = DocSession(own.bootstrap, _env(own.bootstrap, dfs, tmp_path), prefixed=False)
        try:
            for where in ("README.md#1", "training.md#1"):
                for line in blocks[where].splitlines():
                    session.run(line)
            conn = connection_for(load_settings(bootstrap=own.bootstrap))
            sent = len(read_all(conn, "data.demo"))
            assert sent == 10  # examples/records.jsonl, from each of the two blocks
            got = eventually(lambda: (p := read_all(conn, "predictions.demo")) and
                             len(p) >= sent and p, timeout_s=60, what="every record scored")
        finally:
            session.stop()
        assert read_all(conn, "data.demo.dlq") == []
    preds = [parse(Prediction, r.value or b"") for r in got]
    assert len(preds) == sent and {p.model_name for p in preds} == {"demo"}
    assert sorted((p.source_partition, p.source_offset) for p in preds) == sorted(
        {(p.source_partition, p.source_offset) for p in preds})  # one each
