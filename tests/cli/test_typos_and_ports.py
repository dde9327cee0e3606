"""Typos and clashes say what is wrong: a scorer for an unknown stream is refused (with
--create it says what it waits for and the port it bound); a busy port names the port and the
setting that moves it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.streams.clients import KafkaConnection, list_topics
from tests.cli.conftest import lines_until

CLI = [sys.executable, "-c", "import sys; from headrace.cli import main; sys.exit(main())"]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_scorer_for_a_new_stream_with_create_says_what_it_waits_for_and_its_port(
        broker: str, dfs: Path, private_state: Path) -> None:
    proc = subprocess.Popen([*CLI, "--bootstrap", broker, "--dfs-root", str(dfs), "score",
                             "nosuch", "--create", "--http-port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        assert proc.stderr is not None
        seen = lines_until(proc.stderr, lambda ls: any("probes and metrics on" in s for s in ls))
    finally:
        proc.terminate()
        proc.wait(30)
    text = "\n".join(seen)
    assert f"broker: {broker} (from --bootstrap)" in seen, text
    assert "waiting for model nosuch: it has no production version yet" in text
    assert "waiting for records: data.nosuch does not exist yet" in text
    # --http-port 0: the port it bound, and the probes answer there.
    m = re.search(r"probes and metrics on http://127\.0\.0\.1:(\d+) ", text)
    assert m and int(m.group(1)) > 0, text


def test_a_scorer_refuses_an_unknown_stream_naming_the_streams_and_models_there(
        broker: str, dfs: Path, private_state: Path, capsys: pytest.CaptureFixture[str],
        conn: KafkaConnection) -> None:
    stream = "typo" + uuid.uuid4().hex[:8]
    (dfs / "models" / "mymodel").mkdir(parents=True)
    code = main(["--bootstrap", broker, "--dfs-root", str(dfs), "score", stream])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith(f"headrace: invalid: unknown stream {stream}: data.{stream} "
                              "does not exist"), err
    assert "models in" in err[-1] and "mymodel" in err[-1]
    assert f"`headrace score {stream} --create`" in err[-1]
    assert f"data.{stream}" not in list_topics(conn)  # nothing created


@pytest.mark.parametrize(("args", "setting"), [
    (["dashboard", "--port", "{port}"], "`headrace dashboard --port`"),
    (["broker", "--port", "{port}"], "`headrace broker --port` or HEADRACE_EMBEDDED_PORT"),
])
def test_a_busy_port_names_the_port_and_the_setting(
        busy_port: int, dfs: Path, private_state: Path, capsys: pytest.CaptureFixture[str],
        args: list[str], setting: str) -> None:
    code = main(["--dfs-root", str(dfs), *[a.format(port=busy_port) for a in args]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(f"headrace: error: port {busy_port} on ") and setting in err[-1]
    assert "Errno" not in err[-1]


def test_a_scorer_on_a_busy_port_names_the_port_and_the_setting(
        broker: str, dfs: Path, busy_port: int, private_state: Path) -> None:
    proc = subprocess.run([*CLI, "--bootstrap", broker, "--dfs-root", str(dfs), "score",
                           "demo", "--http-port", str(busy_port)],
                          capture_output=True, text=True, timeout=120, check=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last.startswith(f"headrace: error: port {busy_port} on ") and (
        "--http-port or HEADRACE_SCORER_HTTP_PORT" in last)


def test_control_says_what_it_listens_to_and_where_jobs_go(
        broker: str, dfs: Path, private_state: Path) -> None:
    proc = subprocess.Popen([*CLI, "--bootstrap", broker, "--dfs-root", str(dfs), "control",
                             "--topic-prefix", "tctl"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        seen = lines_until(proc.stdout, lambda ls: any("control plane:" in s for s in ls))
    finally:
        proc.terminate()
        proc.wait(30)
    text = " ".join(seen)
    assert f"broker: {broker} (from --bootstrap)" in seen
    assert f"DFS: {dfs} (from --dfs-root)" in seen
    assert f"listening to tctl.events.train-requests on {broker}" in text, text
    assert f"under {dfs / 'jobs'}" in text and f"under {dfs / 'models'}" in text
