"""The one real Kubernetes control plane a test run starts when a test needs it (per xdist
worker): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from
source by tools/kube_build.sh (see tools/kube_cluster.py).

Tests never attach to an API server they did not start: this one is ours, on free loopback
ports, with a kubeconfig in its own folder.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tools.kube_cluster import KubeCluster, KubeUnavailable, cached_bin, go_missing

_cluster: KubeCluster | None = None
_failed: str | None = None


def cluster() -> KubeCluster:
    """The run's control plane, started on first use. Skips, saying why, when the binaries are
    not built and cannot be (no Go, or HEADRACE_KUBE_BUILD=0); fails when they could be but are
    not: the build takes far longer than a test may (``./dev test`` builds them first)."""
    global _cluster, _failed
    if _failed is not None:
        pytest.fail(_failed)
    if _cluster is None:
        if cached_bin() is None:
            if go_missing():
                pytest.skip(f"Kubernetes tests need tools/kube_build.sh's binaries: "
                            f"{go_missing()}")
            if os.environ.get("HEADRACE_KUBE_BUILD", "1") == "0":
                pytest.skip("Kubernetes binaries not built and HEADRACE_KUBE_BUILD=0")
            pytest.fail("Kubernetes binaries not built: run tools/kube_build.sh (./dev test "
                        "runs it; its note says why it failed)")
        try:
            _cluster = KubeCluster(bin_dir=cached_bin()).start()
        except KubeUnavailable as exc:
            _failed = f"cannot start the Kubernetes control plane: {exc}"
            pytest.fail(_failed)
    return _cluster


def own_cluster(**options: Any) -> KubeCluster:
    """A control plane of the caller's own (``KubeCluster`` options: other API server flags,
    no controllers), started now; the caller stops it. Skips or fails as :func:`cluster`."""
    if cached_bin() is None:
        cluster()  # skips or fails, saying why
    try:
        return KubeCluster(bin_dir=cached_bin(), **options).start()
    except KubeUnavailable as exc:
        pytest.fail(f"cannot start a Kubernetes control plane: {exc}")


def started() -> KubeCluster | None:
    return _cluster


def stop() -> None:
    global _cluster
    if _cluster is not None:
        _cluster.stop()
        _cluster = None


def keep_logs(nodeid: str) -> Path | None:
    if _cluster is None:
        return None
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-120:]
    dest = Path(tempfile.gettempdir()) / f"headrace-kube-logs-{os.getpid()}" / name
    return _cluster.keep_logs(dest)
