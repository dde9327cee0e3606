"""A real Schema Registry (Apicurio Registry, Confluent-compatible) on loopback, started from the
build tools/registry_build.sh caches: schemas in memory (H2), or in the Kafka it is given.

    python tools/registry.py [--bootstrap HOST:PORT] [--port N]   (or ./dev registry)

prints one line ``registry: URL`` (the Confluent-compatible base URL, ``.../apis/ccompat/v7``) once
the API answers, and stops it on Ctrl-C or SIGTERM. Tests import :class:`Registry` (a context
manager) and may pause, stop and start it to prove what a client does while it is away.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from headrace.core.child_process import die_with_parent
from headrace.core.ports import free_port

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "registry_build.sh"
CCOMPAT = "/apis/ccompat/v7"
HEAP = "-Xmx384m"


class RegistryUnavailable(RuntimeError):
    """Java or Maven is missing, the build failed, or the registry did not start."""


def java_and_maven_missing() -> str | None:
    """Why the registry cannot be built or started here, or None."""
    missing = [t for t in ("java", "mvn", "unzip") if shutil.which(t) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def build(version: str | None = None) -> Path:
    """The quarkus-app folder (built with Maven and Quarkus on first use, cached after)."""
    why = java_and_maven_missing()
    if why:
        raise RegistryUnavailable(why)
    env = {**os.environ, **({"REGISTRY_VERSION": version} if version else {})}
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RegistryUnavailable(f"tools/registry_build.sh failed: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass
class Registry:
    """One Apicurio Registry JVM on free loopback ports."""

    bootstrap: str | None = None  # Kafka storage (kafkasql) on this cluster; None: in memory
    port: int = 0
    version: str | None = None
    topic: str | None = None  # kafkasql's journal topic (default: a fresh one per registry)
    app: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    home: Path | None = None
    started_s: float = 0.0
    management_port: int = 0
    _paused: bool = field(default=False, repr=False)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL (what HEADRACE_SCHEMA_REGISTRY_URL takes)."""
        return self.base + CCOMPAT

    @property
    def log_path(self) -> Path:
        assert self.home is not None
        return self.home / "registry.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        assert self.app is not None and self.home is not None
        props = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": str(self.port),
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": str(self.management_port),
            "quarkus.http.access-log.enabled": "false",
            "quarkus.otel.sdk.disabled": "true",  # no exporter: nothing leaves loopback
            "quarkus.log.category.\"io.apicurio\".level": "WARN",
            "apicurio.storage.snapshot.location": str(self.home),
            "apicurio.import.work-dir": str(self.home),
            "apicurio.datasource.jdbc.initial-size": "2",
            "apicurio.datasource.jdbc.min-size": "2",
            "apicurio.datasource.jdbc.max-size": "20",
            "apicurio.rest.deletion.artifact.enabled": "true",
            "apicurio.rest.deletion.artifact-version.enabled": "true",
        }
        if self.bootstrap:
            topic = self.topic or f"headrace-registry-{os.getpid()}-{self.port}"
            props.update({
                "apicurio.storage.kind": "kafkasql",
                "apicurio.kafkasql.bootstrap.servers": self.bootstrap,
                "apicurio.kafkasql.topic": topic,
                "apicurio.kafkasql.snapshots.topic": topic + "-snapshots",
            })
        return ["java", HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", "-Djava.io.tmpdir=" + str(self.home),
                *[f"-D{k}={v}" for k, v in props.items()],
                "-jar", str(self.app / "quarkus-run.jar")]

    def start(self, timeout_s: float = 120.0) -> Registry:
        """Build (first use), start on a free port (the same one on a restart), wait for the API."""
        if self.alive():
            return self
        if self.app is None:
            self.app = build(self.version)
        if self.home is None:
            self.home = Path(tempfile.mkdtemp(prefix="headrace-registry-"))
        if not self.port:
            self.port = free_port()
        self.management_port = free_port()
        t0 = time.monotonic()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.home,
                                     preexec_fn=die_with_parent)
        log.close()
        self._paused = False
        self.wait_ready(timeout_s)
        self.started_s = time.monotonic() - t0
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until the Confluent-compatible API answers a read; RegistryUnavailable if it dies."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RegistryUnavailable(f"the registry exited {self.proc and self.proc.poll()}:"
                                          f"\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/subjects", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RegistryUnavailable(f"the registry did not answer in {timeout_s:.0f}s:"
                                  f"\n{self.log_tail()}")

    def log_tail(self, chars: int = 2500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def pause(self) -> None:
        """SIGSTOP: the port stays open and requests hang (a registry that stopped answering)."""
        if self.alive() and not self._paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        if self.alive() and self._paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self._paused = False

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (SIGKILL after ``timeout_s``); the folder stays for a restart."""
        if self.proc is None:
            return
        self.resume()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="registry", description="Start Apicurio Registry (a "
                                 "Confluent-compatible Schema Registry) on loopback until Ctrl-C.")
    ap.add_argument("--bootstrap", default=None,
                    help="store schemas in this Kafka (kafkasql); default: in memory")
    ap.add_argument("--port", type=int, default=0, help="HTTP port (default: a free one)")
    ap.add_argument("--version", default=None, help="Apicurio Registry 3.x version (Maven)")
    args = ap.parse_args(argv)
    if not 0 <= args.port <= 65535:
        print("registry: --port must be between 0 and 65535", file=sys.stderr)
        return 2
    stopping = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    reg = Registry(bootstrap=args.bootstrap, port=args.port, version=args.version)
    try:
        reg.start()
    except (RegistryUnavailable, subprocess.TimeoutExpired) as exc:
        print(f"registry: {str(exc).splitlines()[0]}", file=sys.stderr)
        reg.close()
        return 1
    storage = f"Kafka at {args.bootstrap}" if args.bootstrap else "memory"
    print(f"started in {reg.started_s:.1f}s; schemas in {storage}; log {reg.log_path}; "
          "Ctrl-C stops", file=sys.stderr)
    print(f"registry: {reg.url}", flush=True)
    try:
        while not stopping:
            if not reg.alive():
                print(f"registry: it exited; see {reg.log_path}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    finally:
        reg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
