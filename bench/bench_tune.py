"""``headrace tune`` against a small hand-made grid, every model an ordinary job through the
control plane and local executor, on a dataset not used for choosing any default: a noisy
4-class table from scikit-learn's ``make_classification`` (label noise, overlapping classes).

Run: ``.venv/bin/python bench/bench_tune.py [--framework mxnet] [--trials 12] [--parallel 2]``.
It starts an embedded broker and ``headrace control`` in subprocesses. Prints, for the grid
and for the study: the best validation accuracy and loss, the jobs run and the wall time.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _control import control_plane

from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers import api, jobs
from headrace.trainers.tuning import StudyConfig, run_study

GRID = {"learning_rate": (1e-3, 1e-2, 3e-2), "batch_size": (32, 128),
        "hidden": ((64,), (128, 64))}
SPACE = "learning_rate=log:1e-4:1e-1 batch_size=16,32,64,128 hidden=64|128,64|256,128"


def make_table(path: Path, rows: int, seed: int) -> None:
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=rows, n_features=20, n_informative=8, n_redundant=4,
                               n_classes=4, n_clusters_per_class=2, class_sep=1.0,
                               flip_y=0.03, random_state=seed)
    cols = {f"f{i}": pa.array(x[:, i].astype("float32")) for i in range(x.shape[1])}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({**cols, "label": pa.array(y.astype("int64"))}), path)


def run_grid(conn: KafkaConnection, root: Path, topics: ControlTopics, framework: str,
             epochs: int, parallel: int) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """Every grid point as a plain train job, ``parallel`` at a time; (params, metrics)."""
    points: list[dict[str, Any]] = [dict(zip(GRID, values, strict=True))
                                    for values in itertools.product(*GRID.values())]
    out: list[tuple[dict[str, Any], dict[str, float]]] = []
    pending = list(points)
    running: dict[str, dict[str, Any]] = {}
    while pending or running:
        while pending and len(running) < parallel:
            p = pending.pop(0)
            req = api.build_request(
                model_name="grid", framework=framework, dataset_uri="datasets/noisy.parquet",
                epochs=epochs, hidden=p["hidden"], batch_size=p["batch_size"],
                learning_rate=p["learning_rate"],
                idempotency_key=f"grid:{uuid.uuid4().hex}")
            running[api.request_training(conn=conn, request=req, topics=topics)] = p
        for jid, p in list(running.items()):
            st = jobs.read_status(root, jid)
            if st is not None and st.state.value in ("succeeded", "failed"):
                out.append((p, st.metrics if st.state.value == "succeeded" else {}))
                del running[jid]
        time.sleep(0.5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", default="mxnet")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--rows", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    make_table(root / "datasets" / "noisy.parquet", args.rows, args.seed)
    with control_plane(root, args.parallel) as (conn, topics):
        t0 = time.monotonic()
        grid = run_grid(conn, root, topics, args.framework, args.epochs, args.parallel)
        grid_s = time.monotonic() - t0
        t0 = time.monotonic()
        config = StudyConfig(name="bench", model_name="tuned", framework=args.framework,
                             dataset_uri="datasets/noisy.parquet", epochs=args.epochs,
                             space=SPACE, pruner="median")
        result = run_study(root=root, conn=conn, config=config, trials=args.trials,
                           parallel=args.parallel, topics=topics, poll_s=0.5)
        tune_s = time.monotonic() - t0
    ok = [m for _, m in grid if m]
    best_grid = min(ok, key=lambda m: m["loss"])
    best_p = next(p for p, m in grid if m is best_grid)
    print(f"{args.framework} mlp, make_classification {args.rows} rows x 20 features, 4 classes, "
          f"max {args.epochs} epochs; parallel {args.parallel}")
    print(f"grid  {len(grid):2d} jobs  {grid_s:6.0f}s  best loss {best_grid['loss']:.4f}  "
          f"accuracy {best_grid['accuracy']:.4f}  {best_p}")
    b = result.best
    pruned = sum(t.state == "pruned" for t in result.trials)
    if b is None:
        print("tune: no trial completed")
        return
    st = jobs.read_status(root, b.job_id)
    acc = st.metrics.get("accuracy", float("nan")) if st else float("nan")
    print(f"tune  {len(result.trials):2d} trials {tune_s:6.0f}s  best loss {b.value:.4f}  "
          f"accuracy {acc:.4f}  {b.params}  ({pruned} pruned)")


if __name__ == "__main__":
    main()
