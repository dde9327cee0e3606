"""Training overhead: TrainRequested -> job started, and training end -> ModelPublished,
against the bare in-process training time of the same model.

Run: ``.venv/bin/python bench/bench_training_overhead.py [--framework mxnet] [--jobs 3]``.
It starts an embedded broker and a control plane (``headrace control``) in subprocesses and
trains tiny models on the demo dataset. Target: each overhead < 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from headrace.contracts import JobEvent, ModelPublished, ModelSpec, TrainRequested
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import send_events
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers.datasets import load_dataset, make_demo, split

REPO = Path(__file__).resolve().parents[1]


def bare_training_s(root: Path, uri: str, framework: str, spec: ModelSpec) -> float:
    """The same model trained in this process (framework already imported)."""
    from headrace.trainers.backends import get_backend
    from headrace.trainers.evaluation import evaluate

    backend = get_backend(framework)
    t0 = time.perf_counter()
    ds = load_dataset(root=root, uri=uri, spec=spec)
    sp = split(ds, validation_split=spec.validation_split, seed=spec.seed)
    model = backend.create(spec=spec, n_features=32, n_outputs=3, seed=spec.seed)
    bs = spec.batch_size
    for _ in range(spec.epochs):
        for i in range(0, len(sp.x_train), bs):
            model.fit_batch(sp.x_train[i:i + bs], sp.y_train[i:i + bs])
    evaluate(task=spec.task, outputs=model.predict(sp.x_val), y=sp.y_val, classes=ds.classes)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", default="mxnet")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    spec = ModelSpec(epochs=args.epochs, hidden=(64, 64), batch_size=64)
    root = Path(tempfile.mkdtemp(prefix="bench-dfs-"))
    make_demo(out=root / "demo.parquet", rows=args.rows)
    broker = EmbeddedBroker().start()
    conn = KafkaConnection(broker.bootstrap, timeout_s=15.0)
    topics = ControlTopics.with_prefix("b" + uuid.uuid4().hex[:8])
    ensure_topics(conn, topics.specs())
    env = {**os.environ, "HEADRACE_BOOTSTRAP": broker.bootstrap, "HEADRACE_DFS_ROOT": str(root)}
    ctl = subprocess.Popen([sys.executable, "-c", "from headrace.cli import main; main()",
                            "control", "--topic-prefix", topics.prefix], cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bare = [bare_training_s(root, "demo.parquet", args.framework, spec) for _ in range(3)]
        time.sleep(8)  # the control plane joins its group and recovers its tables
        rows = []
        for i in range(args.jobs):
            req = TrainRequested(idempotency_key=f"bench-{uuid.uuid4().hex}", model_name="bench",
                                 framework=args.framework, dataset_uri="demo.parquet", spec=spec)
            sent = time.time()
            send_events(conn, topics.train_requests, [req])
            jid = _job_id(req)
            evs = _wait(conn, topics, jid)
            started = next(e for e in evs if e.kind == "started").ts.timestamp()
            progress = [e for e in evs if e.kind == "progress"]
            trained = progress[-1].ts.timestamp()
            first_epoch = progress[0].ts.timestamp()
            pubs = [p for p in read_events(conn, topics.models, ModelPublished) if p.job_id == jid]
            done = next(e for e in evs if e.kind == "succeeded").ts.timestamp()
            end = pubs[0].ts.timestamp() if pubs else done
            rows.append({"job": i, "request_to_start_s": started - sent,
                         "start_to_first_epoch_s": first_epoch - started,
                         "train_end_to_published_s": end - trained,
                         "request_to_published_s": end - sent, "promoted": bool(pubs)})
        b = statistics.median(bare)
        print(f"framework {args.framework}, {args.rows} rows, {args.epochs} epochs, hidden 64,64")
        print(f"bare in-process training (median of 3): {b:.3f}s")
        for r in rows:
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                              for k, v in r.items()}))
        for key in ("request_to_start_s", "start_to_first_epoch_s", "train_end_to_published_s",
                    "request_to_published_s"):
            med = statistics.median(r[key] for r in rows)
            print(f"{key:28s} median {med:7.3f}s  ratio to bare training {med / b:6.2f}x")
        ok = all(statistics.median(r[k] for r in rows) < 2.0
                 for k in ("request_to_start_s", "train_end_to_published_s"))
        print("target (< 2 s each for request->start and train end->published):",
              "met" if ok else "NOT met")
    finally:
        ctl.send_signal(signal.SIGTERM)
        ctl.wait(30)
        broker.stop()


def _job_id(req: TrainRequested) -> str:
    from headrace.trainers.jobs import job_id_for

    return job_id_for(req.idempotency_key)


def _wait(conn: KafkaConnection, topics: ControlTopics, jid: str) -> list[JobEvent]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        evs = [e for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.3) if e.job_id == jid]
        if any(e.kind in ("succeeded", "failed") for e in evs):
            return evs
        time.sleep(0.3)
    raise SystemExit(f"job {jid} did not finish")


if __name__ == "__main__":
    main()
