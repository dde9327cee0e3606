"""The CPU image from tools/build_image.sh (`./dev image`), run with runc as the chart runs it:
uid 10001 from the image, a read-only root filesystem, /tmp writable, no capabilities. A scorer
in it reaches the session's embedded broker on the host's loopback (host network namespace) and
reads models from the test's DFS, mounted read-only.

The image is rebuilt only when its inputs changed (`--reuse`); a fresh build takes minutes."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headrace.core.ports import free_port
from headrace.core.settings import Settings
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import catalog, data_topic, predictions_topic
from tests.scorers.conftest import (
    eventually,
    http_get,
    predictions,
    publish_tf,
    read_topic,
    rows,
    send_json,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "build" / "image"
TOOLS = ("mmdebstrap", "umoci", "skopeo", "runc")
# What fails when something writes outside /tmp and the DFS.
WRITE_ERRORS = ("Read-only file system", "Permission denied")


def _cannot_run() -> str | None:
    if not sys.platform.startswith("linux"):
        return "needs Linux (mmdebstrap, umoci, runc)"
    if os.geteuid() != 0:
        return "needs root: mmdebstrap's root mode, chroot and runc (./dev image runs as root)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return (f"needs Debian's {' '.join(missing)}: `./dev test` installs them as root with "
                "apt-get; no apt-get or not root here")
    return None


@dataclass(frozen=True)
class Image:
    version: str
    digest: str
    config: dict[str, Any]  # the runtime spec umoci derived from the image config
    rootfs: Path


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    why = _cannot_run()
    if why:
        pytest.skip(why)
    build = subprocess.run([str(REPO / "tools" / "build_image.sh"), "--reuse"], cwd=REPO,
                           capture_output=True, text=True, timeout=3000)
    assert build.returncode == 0, (build.stdout + build.stderr)[-4000:]
    info = dict(line.split("=", 1) for line in
                (OUT / "image.env").read_text().splitlines() if "=" in line)
    with (REPO / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert info["VERSION"] == version
    # The archive is the deliverable: its index names the same manifest as the layout.
    with tarfile.open(OUT / f"headrace-{version}.tar") as t:
        index = json.load(t.extractfile("index.json"))  # type: ignore[arg-type]
    assert [m["digest"] for m in index["manifests"]] == [info["DIGEST"]]
    bundle = tmp_path_factory.mktemp("image") / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{OUT / 'oci'}:{version}", str(bundle)],
                   check=True, capture_output=True, timeout=1200)
    config = json.loads((bundle / "config.json").read_text())
    yield Image(version, info["DIGEST"], config, bundle / "rootfs")
    shutil.rmtree(bundle, ignore_errors=True)  # 2.5 GB: not left to pytest's kept temp dirs


class Container:
    """One runc container from the unpacked image (a private runc state root)."""

    def __init__(self, image: Image, workdir: Path, args: list[str], *,
                 env: dict[str, str] | None = None, dfs: Path | None = None) -> None:
        self.id = f"headrace-test-{uuid.uuid4().hex[:10]}"
        self.state = workdir / "runc-state"
        self.tmp = workdir / "tmp"  # the container's /tmp: an emptyDir in the chart
        self.tmp.mkdir(parents=True)
        self.tmp.chmod(0o1777)
        bundle = workdir / "bundle"
        bundle.mkdir()
        spec = copy.deepcopy(image.config)
        proc = spec["process"]
        proc["terminal"] = False
        proc["args"] = args
        proc["env"] = [*proc["env"], *(f"{k}={v}" for k, v in (env or {}).items())]
        proc["capabilities"] = {k: [] for k in proc["capabilities"]}  # drop ALL
        proc["noNewPrivileges"] = True
        spec["root"] = {"path": str(image.rootfs), "readonly": True}
        mounts = [m for m in spec["mounts"] if m["destination"] not in ("/tmp", "/dfs")]
        mounts.append({"destination": "/tmp", "type": "bind", "source": str(self.tmp),
                       "options": ["rbind", "rw", "nosuid", "nodev"]})
        if dfs is not None:
            mounts.append({"destination": "/dfs", "type": "bind", "source": str(dfs),
                           "options": ["rbind", "ro", "nosuid", "nodev"]})
        spec["mounts"] = mounts
        # The host's network namespace: the embedded broker listens on the host's loopback.
        spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"]
                                       if n["type"] != "network"]
        (bundle / "config.json").write_text(json.dumps(spec))
        self.cmd = ["runc", "--root", str(self.state), "run", "--bundle", str(bundle), self.id]

    def run(self, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(self.cmd, capture_output=True, text=True, timeout=timeout_s)
        finally:
            self.delete()

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def signal(self, sig: str) -> None:
        subprocess.run(["runc", "--root", str(self.state), "kill", self.id, sig], check=True,
                       capture_output=True, timeout=30)

    def delete(self) -> None:
        subprocess.run(["runc", "--root", str(self.state), "delete", "--force", self.id],
                       capture_output=True, timeout=60)


@pytest.fixture
def container_dir(tmp_path: Path) -> Path:
    return tmp_path / "container"


def _entrypoint(image: Image) -> list[str]:
    return list(image.config["process"]["args"])


def test_image_runs_headrace_as_uid_10001_from_its_entrypoint(image: Image,
                                                              container_dir: Path) -> None:
    assert _entrypoint(image) == ["headrace"]
    user = image.config["process"]["user"]
    assert (user["uid"], user["gid"]) == (10001, 10001)
    out = Container(image, container_dir, [*_entrypoint(image), "--version"]).run()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"headrace {image.version}"


def test_every_role_imports_on_a_read_only_root_and_writes_only_under_tmp(
        image: Image, container_dir: Path) -> None:
    code = "\n".join([
        "import os, numpy",
        "numpy.bool = bool  # as the MXNet backend does",
        "import tensorflow, keras, mxnet, faust, matplotlib.pyplot as plt, kubernetes",
        "import prometheus_client, confluent_kafka, pyarrow, croniter",
        "import headrace.cli, headrace.trainers.control.app, headrace.scorers.serving",
        "plt.plot([0, 1]); plt.savefig('/tmp/plot.png')",
        "print(os.getuid(), os.getgid(), tensorflow.__version__, mxnet.__version__)",
        "try:",
        "    open('/opt/headrace/x', 'w')",
        "except OSError as e:",
        "    print('root:', e.strerror)",
    ])
    c = Container(image, container_dir, ["python3", "-c", code])
    out = c.run()
    assert out.returncode == 0, out.stderr[-3000:]
    uid, gid, tf, mx = out.stdout.splitlines()[0].split()
    assert (uid, gid, mx) == ("10001", "10001", "1.9.1")
    assert tf.startswith("2.21.")
    assert "root: Read-only file system" in out.stdout
    assert not [e for e in WRITE_ERRORS if e in out.stderr], out.stderr[-3000:]
    written = {p.relative_to(c.tmp).parts[0] for p in c.tmp.rglob("*")}
    assert "plot.png" in written  # matplotlib's and Keras's caches went under /tmp too


def _ready(port: int) -> bool:
    try:
        return http_get(port, "/readyz")[0] == 200
    except OSError:  # not listening yet
        return False


@pytest.fixture
def scorer_container(image: Image, container_dir: Path, settings: Settings,
                     conn: KafkaConnection, dfs: Path) -> Iterator[tuple[Container, int]]:
    stream = settings.streams[0]
    ensure_topics(conn, catalog(settings))
    publish_tf(dfs, stream)
    port = free_port()
    c = Container(image, container_dir, [
        *_entrypoint(image), "score", stream, "--partitions", "0,1,2", "--http-port", str(port),
        "--device", "cpu", "--batch-size", "64", "--grace-s", "10",
    ], env={"HEADRACE_BOOTSTRAP": str(settings.bootstrap), "HEADRACE_DFS_ROOT": "/dfs"},
        dfs=dfs)
    yield c, port
    c.delete()


def test_scorer_in_the_image_serves_readyz_scores_and_exits_zero_on_sigterm(
        scorer_container: tuple[Container, int], settings: Settings,
        conn: KafkaConnection) -> None:
    c, port = scorer_container
    stream = settings.streams[0]
    send_json(conn, data_topic(stream), rows(40))
    proc = c.start()
    try:
        eventually(lambda: proc.poll() is not None or _ready(port),
                   timeout_s=240, what="/readyz from the containerised scorer")
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        got = predictions(read_topic(conn, predictions_topic(stream), expect=40,
                                     timeout_s=120))
        assert sorted(p["key"] for p in got) == sorted(f"k{i}" for i in range(40))
        assert {(p["model_name"], p["model_version"]) for p in got} == {(stream, 1)}
        c.signal(signal.SIGTERM.name)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    assert not [e for e in WRITE_ERRORS if e in out], out[-3000:]
