"""A real MLflow tracking server and model registry on loopback: SQLite backend, artifacts
proxied to a local folder, no other service.

    python tools/mlflow_server.py [--dir DIR] [--port P]   (or ./dev mlflow)

prints one line ``mlflow: http://127.0.0.1:PORT`` once the server answers, and stops it on
Ctrl-C or SIGTERM. Tests import :class:`MlflowServer` (a context manager).

The server runs from its own virtual environment (``.venv-mlflow`` beside this checkout, made
by ``./dev``; ``HEADRACE_MLFLOW_PYTHON`` names another interpreter): MLflow's server pulls in
Flask, gunicorn, graphene, docker, databricks-sdk and alembic (about 860 MB in all), none of
which Headrace uses; Headrace talks to it over its REST API (``headrace.imports.mlflow_rest``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from headrace.core.child_process import die_with_parent
from headrace.core.ports import free_port

CHECKOUT = Path(__file__).resolve().parent.parent
VENV = CHECKOUT / ".venv-mlflow"
START_TIMEOUT_S = 240.0  # the first start creates the SQLite schema (alembic): slow on 2 cores


class MlflowUnavailable(RuntimeError):
    """No interpreter with MLflow installed, or the server did not come up."""


def mlflow_python() -> Path | None:
    """The interpreter that runs the server, or None when there is none."""
    named = os.environ.get("HEADRACE_MLFLOW_PYTHON")
    path = Path(named) if named else VENV / "bin" / "python"
    return path if path.exists() else None


def why_unavailable() -> str | None:
    """Why a server cannot be started here, or None."""
    if mlflow_python() is None:
        return (f"no MLflow server environment ({VENV} is missing; `./dev mlflow` makes it, "
                f"or set HEADRACE_MLFLOW_PYTHON)")
    return None


class MlflowServer:
    """``mlflow server`` on a free loopback port, its store and artifacts under ``root``."""

    def __init__(self, root: Path | None = None, port: int = 0) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="headrace-mlflow-")) if root is None else root
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> MlflowServer:
        python = mlflow_python()
        if python is None:
            raise MlflowUnavailable(why_unavailable() or "no MLflow")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "artifacts").mkdir(exist_ok=True)
        cmd = [str(python), "-m", "mlflow", "server",
               "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
               "--artifacts-destination", str(self.root / "artifacts"),
               "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        # No job runner (three huey consumers, ~230 MB each, for server-side jobs Headrace
        # never submits) and no telemetry (nothing leaves loopback).
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
               "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
                                         start_new_session=True)
        self._wait_ready(t0 + timeout_s)
        self.started_s = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise MlflowUnavailable(f"mlflow server exited ({self.proc.returncode}): "
                                        f"{self.log_tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"{self.url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise MlflowUnavailable(f"mlflow server did not answer in time: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM to the server's process group (gunicorn/uvicorn workers too), then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> MlflowServer:
        return self if self.proc is not None else self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_server(root: Path | None = None) -> Iterator[MlflowServer]:
    with MlflowServer(root) as server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mlflow", description="Start an MLflow tracking server "
                                 "and registry on loopback until Ctrl-C or SIGTERM.")
    ap.add_argument("--dir", type=Path, default=None,
                    help="keep the store and artifacts here (default: a temp dir, removed)")
    ap.add_argument("--port", type=int, default=0, help="default: a free port")
    args = ap.parse_args(argv)
    stopping = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = MlflowServer(root=args.dir, port=args.port)
    try:
        server.start()
    except MlflowUnavailable as exc:
        print(f"mlflow: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"started in {server.started_s:.1f}s; store and artifacts in {server.root}; "
          "Ctrl-C stops", file=sys.stderr)
    print(f"mlflow: {server.url}", flush=True)
    try:
        while not stopping:
            if server.proc is None or server.proc.poll() is not None:
                print("mlflow: the server exited; stopping", file=sys.stderr)
                break
            time.sleep(0.5)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
