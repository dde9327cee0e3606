"""The local stack: broker, control plane + local executor, a scorer per stream, the dashboard.

Each role runs as its own ``headrace`` subprocess (the same commands an operator would run by
hand: ``headrace control``, ``headrace score STREAM``), pointed at one broker and one DFS root
through the environment, so the stack exercises exactly what production runs. The broker is
the embedded one unless ``HEADRACE_BOOTSTRAP`` names a cluster.

Shutdown (Ctrl-C, or any component dying): SIGTERM every child, wait for the grace period,
SIGKILL what is left, then stop the broker -- children first, so they can commit and close.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from headrace.core.errors import FatalError
from headrace.core.ports import free_port
from headrace.core.settings import Settings
from headrace.streams.broker import (
    MEMORY_ONLY_NOTICE,
    EmbeddedBroker,
    clear_state,
    find_running,
    write_state,
)
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.connection import connection_for
from headrace.streams.topics import catalog

GRACE_S = 15.0
CLI = [sys.executable, "-c", "import sys; from headrace.cli import main; sys.exit(main())"]


@dataclass
class Component:
    """One ``headrace`` subprocess with its log file."""

    name: str
    args: list[str]
    log_path: Path
    metrics_url: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    started_at: float = 0.0
    extra_env: dict[str, str] = field(default_factory=dict)

    def start(self, env: dict[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([*CLI, *self.args], stdout=self._log, stderr=self._log,
                                     stdin=subprocess.DEVNULL, env={**env, **self.extra_env},
                                     start_new_session=True)
        self.started_at = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is None:
            return f"running (pid {self.proc.pid}, {time.monotonic() - self.started_at:.0f}s)"
        return f"exited with code {code} (log: {self.log_path})"

    def last_log_line(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, self.log_path.stat().st_size - 4096))
                lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln]
            return lines[-1][:200] if lines else ""
        except OSError:
            return ""

    def terminate(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


class Stack:
    """Broker + components; ``start`` brings them up, ``stop`` takes them down in order."""

    def __init__(self, settings: Settings, *, log_dir: Path, scorers: Sequence[str] | None = None,
                 control: bool = True) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.broker: EmbeddedBroker | None = None
        self.conn: KafkaConnection | None = None
        self.components: list[Component] = []
        self.streams = list(settings.streams if scorers is None else scorers)
        self.control = control
        self.control_url: str | None = None  # its probes, once started

    def env(self) -> dict[str, str]:
        assert self.conn is not None
        env = dict(os.environ)
        env["HEADRACE_BOOTSTRAP"] = self.conn.bootstrap
        env["HEADRACE_DFS_ROOT"] = str(self.settings.dfs_root)
        env["HEADRACE_STREAMS"] = ",".join(self.settings.streams)
        env["HEADRACE_TOPIC_PREFIX"] = self.settings.topic_prefix  # the control topics' namespace
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start_broker(self) -> KafkaConnection:
        if self.settings.bootstrap:
            self.conn = connection_for(self.settings)
        else:
            self.broker = EmbeddedBroker(port=self.settings.embedded_port,
                                         log_path=self.log_dir / "broker.log").start()
            self.conn = connection_for(self.settings, self.broker.bootstrap)
        ensure_topics(self.conn, catalog(self.settings))  # the connection's durability
        return self.conn

    def add(self, name: str, args: list[str], *, metrics_url: str | None = None,
            extra_env: dict[str, str] | None = None) -> Component:
        c = Component(name, args, self.log_dir / f"{name}.log", metrics_url,
                      extra_env=dict(extra_env or {}))
        c.start(self.env())
        self.components.append(c)
        return c

    def start_control(self) -> Component:
        # A known probes port, so the dashboard's health panel can show the control plane.
        port = free_port()
        self.control_url = f"http://127.0.0.1:{port}"
        return self.add("control-plane", ["control"], extra_env={
            "HEADRACE_CONTROL_HTTP_PORT": str(port), "HEADRACE_CONTROL_HTTP_HOST": "127.0.0.1"})

    def start_scorer(self, stream: str, *, model: str | None = None) -> Component:
        port = free_port()
        args = ["score", stream, "--http-port", str(port)] + (["--model", model] if model else [])
        return self.add(f"scorer-{stream}", args, metrics_url=f"http://127.0.0.1:{port}/metrics")

    def start(self) -> None:
        self.start_broker()
        if self.control:
            self.start_control()
        for s in self.streams:
            self.start_scorer(s)

    def dead(self) -> list[Component]:
        return [c for c in self.components if not c.alive]

    def stop(self) -> None:
        for c in reversed(self.components):
            c.terminate()
        deadline = time.monotonic() + GRACE_S
        for c in reversed(self.components):
            c.wait_or_kill(deadline)
        if self.broker is not None:
            self.broker.stop()
            self.broker = None


def run_up(*, settings: Settings, dashboard_port: int, say: Callable[[str], None],
           stop: threading.Event | None = None, status_every_s: float = 10.0) -> int:
    """``headrace up``: run until Ctrl-C (or ``stop``); a status line per component."""
    from headrace.ops.dashboard import Dashboard

    stop = stop or threading.Event()
    log_dir = settings.dfs_root / "ops" / "logs" / time.strftime("up-%Y%m%dT%H%M%S")
    stack = Stack(settings, log_dir=log_dir)
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    dash = None
    recorded = False
    try:
        conn = stack.start_broker()
        where = "embedded broker" if stack.broker else "Kafka"
        say(f"● broker        {where} at {conn.bootstrap}")
        if stack.broker:
            # Recorded like `headrace broker` does, so short commands in another terminal find
            # it; a running `headrace broker` keeps the state file it wrote.
            other = find_running()
            if other is None:
                write_state(stack.broker)
                recorded = True
            else:
                say(f"  note: short commands keep using {other.describe()}")
            say(f"  export HEADRACE_BOOTSTRAP={conn.bootstrap}")
            say(f"  note: {MEMORY_ONLY_NOTICE}")
        stack.start_control()
        for s in stack.streams:
            stack.start_scorer(s)
        dash = Dashboard(settings=settings, conn=conn, port=dashboard_port,
                         scorer_urls=[c.metrics_url for c in stack.components if c.metrics_url],
                         control_url=stack.control_url)
        url = dash.start()
        _status(say, stack)
        say(f"● dashboard     {url}")
        say(f"  DFS root {settings.dfs_root}; logs in {log_dir}; Ctrl-C stops everything")
        next_status = time.monotonic() + status_every_s
        while not stop.wait(0.5):
            dead = stack.dead()
            if dead:
                _status(say, stack)
                raise FatalError(f"{dead[0].name} {dead[0].status()}: {dead[0].last_log_line()}")
            if time.monotonic() >= next_status:
                _status(say, stack)
                next_status = time.monotonic() + status_every_s
        say("stopping…")
        return 0
    finally:
        if dash is not None:
            dash.stop()
        if recorded:
            clear_state()
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        say("stopped: scorers, control plane, broker")


def _status(say: Callable[[str], None], stack: Stack) -> None:
    for c in stack.components:
        dot = "●" if c.alive else "[red]●[/]"
        extra = f"  metrics {c.metrics_url}" if c.metrics_url else ""
        say(f"{dot} {c.name:<13} {c.status()}{extra}")


def wait_until(cond: Callable[[], bool], *, timeout_s: float, what: str,
               stack: Stack | None = None, poll_s: float = 0.5) -> None:
    """Poll ``cond``; fail with one line on timeout or when a stack component dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        if stack is not None:
            dead = stack.dead()
            if dead:
                raise FatalError(f"{dead[0].name} {dead[0].status()}: {dead[0].last_log_line()}")
        time.sleep(poll_s)
    raise FatalError(f"timed out after {timeout_s:.0f}s waiting for {what}")
