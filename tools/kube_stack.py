"""What ``./dev kube`` runs: a :class:`KubeCluster` and, with ``--kueue``, JobSet and Kueue beside
it, until Ctrl-C.

    python tools/kube_stack.py [--dir DIR] [--kueue]   (or ./dev kube [--kueue])

prints ``kubeconfig: PATH`` once the API server answers and every component is up, and stops it all
on Ctrl-C or SIGTERM. It sits above the cluster and the controllers, so none of them imports it.
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
                                 "(etcd, API server, scheduler, controller-manager, kwok) on "
                                 "loopback until Ctrl-C.")
    ap.add_argument("--dir", type=Path, default=None, help="state folder (default: a temp dir)")
    ap.add_argument("--kueue", action="store_true",
                    help="also install and run JobSet and Kueue (gang admission against "
                    "quota)")
    args = ap.parse_args(argv)
    try:
        cluster = KubeCluster(args.dir).start()
    except KubeUnavailable as exc:
        print(f"kube: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    controllers: list[Any] = []
    if args.kueue:
        try:
            for make in (JobSet, lambda c: Kueue(c, jobset=True)):
                controllers.append(make(cluster))
                controllers[-1].start()
        except KubeUnavailable as exc:
            for c in reversed(controllers):
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
    for c in controllers:
        print(f"{c.name}: {c.version} running (log {c.log_path})", flush=True)
    try:
        while not stop:
            time.sleep(0.5)
            if not stop:  # Ctrl-C reaches the whole process group: etcd may be gone already
                cluster._check_alive()
    except KubeUnavailable as exc:
        print(f"kube: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        for c in reversed(controllers):
            c.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
