"""Pods that reach each other only by name: one Linux network namespace per pod.

Each pod gets its own network namespace with a veth onto a private bridge and its own address
(``10.<net>.<n>``), and runs in a private mount namespace where ``/etc/hosts`` is a file naming
every pod of the gang -- what a headless Service's DNS gives real pods. Nothing else resolves
and loopback is the pod's own, so a member that binds or dials anything but its peers' names
fails as it would in a cluster. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and ``ip``:
:func:`available` says whether this machine can.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def available() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        return False
    probe = f"hrp{uuid.uuid4().hex[:8]}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return False
    _ip("netns", "del", probe, check=False)
    return True


class PodNetwork:
    """A bridge and one namespace per named pod; :meth:`run` starts a process in a pod."""

    def __init__(self, names: Sequence[str], workdir: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.bridge = f"hrb{tag}"
        self.net = 200 + int(tag[:2], 16) % 50  # 10.<net>.0.0/24, unlikely to clash
        self.pods = {name: (f"hrn{tag}{i}", f"10.{self.net}.0.{10 + i}")
                     for i, name in enumerate(names)}
        self.hosts = workdir / "hosts"
        lines = ["127.0.0.1 localhost"] + [f"{ip} {name}" for name, (_, ip) in self.pods.items()]
        self.hosts.write_text("\n".join(lines) + "\n")
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> PodNetwork:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for i, (ns, ip) in enumerate(self.pods.values()):
            host_end, pod_end = f"hrh{self.bridge[3:]}{i}", f"hrp{self.bridge[3:]}{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", pod_end)
            _ip("link", "set", host_end, "master", self.bridge)
            _ip("link", "set", host_end, "up")
            _ip("link", "set", pod_end, "netns", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", pod_end)
            _ip("-n", ns, "link", "set", pod_end, "up")
        return self

    def run(self, name: str, argv: Sequence[str], *, env: Mapping[str, str],
            out: IO[bytes]) -> subprocess.Popen[bytes]:
        """Start ``argv`` in pod ``name`` with its private ``/etc/hosts``."""
        ns, _ = self.pods[name]
        wrapper = ['ip', 'netns', 'exec', ns, 'unshare', '--mount', '--propagation', 'private',
                   'sh', '-c', 'mount --bind "$0" /etc/hosts && exec "$@"', str(self.hosts),
                   *argv]
        proc = subprocess.Popen(wrapper, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for i, (ns, _) in enumerate(self.pods.values()):
            _ip("link", "del", f"hrh{self.bridge[3:]}{i}", check=False)
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
