"""What ``./dev kube`` runs: a :class:`KubeCluster` with kwok's simulated GPU and CPU nodes and,
with ``--kueue``, JobSet and Kueue beside it, with ``--kubelet`` a real node, until Ctrl-C.

    python tools/kube_stack.py [--dir DIR] [--kueue] [--kubelet]   (or ./dev kube ...)

prints ``kubeconfig: PATH`` once the API server answers and every component is up (then a line
for the kwok nodes, each controller and the real node), and stops it all on Ctrl-C or SIGTERM.
It sits above the cluster, the controllers and the node, so none of them imports it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a script: tools/ is not a package then
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.jobset import JobSet
from tools.kube_cluster import KubeCluster, KubeUnavailable
from tools.kueue import Kueue


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kube", description="Start a Kubernetes control plane "
                                 "(etcd, API server, scheduler, controller-manager, kwok with "
                                 "simulated GPU and CPU nodes) on loopback until Ctrl-C.")
    ap.add_argument("--dir", type=Path, default=None, help="state folder (default: a temp dir)")
    ap.add_argument("--kueue", action="store_true",
                    help="also install and run JobSet and Kueue (gang admission against "
                    "quota)")
    ap.add_argument("--kubelet", action="store_true",
                    help="also run one real node: a kubelet and containerd on this machine "
                    "(root; tools/kube_build.sh node builds them)")
    args = ap.parse_args(argv)
    try:
        cluster = KubeCluster(args.dir).start()
    except KubeUnavailable as exc:
        print(f"kube: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    extras: list[Any] = []  # started beside the control plane, stopped before it
    lines = []
    try:
        nodes = cluster.add_kwok_nodes()
        lines.append(f"kwok nodes: {', '.join(nodes)} (simulated; GPU nodes tainted "
                     "nvidia.com/gpu)")
        if args.kueue:
            for make in (JobSet, lambda c: Kueue(c, jobset=True)):
                extras.append(make(cluster))
                extras[-1].start()
                lines.append(f"{extras[-1].name}: {extras[-1].version} running "
                             f"(log {extras[-1].log_path})")
        if args.kubelet:
            from tools.kube_node import RealNode

            extras.append(RealNode(cluster))
            extras[-1].start()
            lines.append(extras[-1].describe())
    except KubeUnavailable as exc:
        for c in reversed(extras):
            c.stop()
        cluster.stop()
        print(f"kube: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    stop = False

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"kubeconfig: {cluster.kubeconfig}  (Kubernetes {cluster.version}, "
          f"started in {cluster.started_s:.1f}s; Ctrl-C stops it)", flush=True)
    for line in lines:
        print(line, flush=True)
    try:
        while not stop:
            time.sleep(0.5)
            if not stop:  # Ctrl-C reaches the whole process group: etcd may be gone already
                cluster._check_alive()
                for c in extras:
                    if hasattr(c, "check_alive"):
                        c.check_alive()
    except KubeUnavailable as exc:
        print(f"kube: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        for c in reversed(extras):
            c.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
