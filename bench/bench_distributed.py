"""Distributed training: time per epoch and samples/s for 1 vs 2 workers, TensorFlow
(all-reduce, MultiWorkerMirroredStrategy) and MXNet (parameter servers, dist_sync), with the
communication time per step measured on its own (an all-reduce / push-pull of the model's
gradient-sized tensors).

The model is a small CNN on scikit-learn's bundled digits (8x8 images, 10 classes). The
``cnn`` family was not on main when this was written, so the CNN is defined here; it goes
through the project's distributed runtimes (``headrace.trainers.backends.tf_allreduce`` /
``mxnet_ps``) and its local gang launcher (``headrace.trainers.distributed.gang``), i.e. the
same step, sharding and thread caps as a training job.

Run (here, 2 cores: expect little or no speed-up -- the two workers share the cores):
    .venv/bin/python bench/bench_distributed.py
On a bigger machine (more cores, so each worker gets its own):
    .venv/bin/python bench/bench_distributed.py --workers 1,2,4 --epochs 5 --batch 256 --cpus 16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from headrace.contracts import ModelSpec
from headrace.trainers.distributed.gang import LocalGang, member_specs
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.distributed.plan import plan_for
from headrace.trainers.executors.base import ps_node_command

RESULT = "BENCH-RESULT "


def _digits() -> tuple[Any, Any]:
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)  # (n, 8, 8)
    return x, d.target.astype(np.int64)


def _tf_model(runtime: Any, lr: float) -> Any:
    import keras

    from headrace.trainers.backends.tensorflow_keras import KerasModel

    keras.utils.set_random_seed(0)
    with runtime.scope():
        m = keras.Sequential([
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax")])
        m.compile(optimizer=keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy")
    return runtime.wrap(KerasModel(m, "cpu"))


def _tf_comm(model: Any, reps: int) -> float:
    """Seconds per all-reduce of tensors shaped like the model's gradients."""
    import tensorflow as tf

    strategy = model.strategy
    shapes = [v.shape for v in model.keras_model.trainable_variables]

    @tf.function
    def reduce_once() -> Any:
        def replica() -> Any:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.ones(s) for s in shapes])
        return strategy.run(replica)

    reduce_once()
    t0 = time.perf_counter()
    for _ in range(reps):
        reduce_once()
    return (time.perf_counter() - t0) / reps


def _mx_model(runtime: Any, lr: float) -> Any:
    import mxnet as mx
    from mxnet import gluon

    from headrace.trainers.backends.mxnet_gluon import GluonBackend

    inner = GluonBackend().create(spec=ModelSpec(hidden=(1,), learning_rate=lr), n_features=64,
                                  n_outputs=10, seed=0)
    mx.random.seed(0)
    body = gluon.nn.HybridSequential()
    with body.name_scope():
        body.add(gluon.nn.Conv2D(16, 3, padding=1, activation="relu"),
                 gluon.nn.Conv2D(32, 3, padding=1, activation="relu"),
                 gluon.nn.MaxPool2D(2), gluon.nn.Flatten(),
                 gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    body.initialize(mx.init.Xavier(), ctx=inner.ctx)
    body(mx.nd.zeros((1, 1, 8, 8), ctx=inner.ctx))
    body.hybridize()
    inner.body = body  # any HybridBlock: the runtime trains inner.body
    inner.trainer = gluon.Trainer(body.collect_params(), "adam", {"learning_rate": lr})
    return runtime.wrap(inner)


def _mx_comm(model: Any, reps: int) -> float:
    """Seconds per push+pull of arrays shaped like the model's gradients (fresh keys)."""
    import mxnet as mx

    arrays = [mx.nd.ones(p.shape) for p in model.inner.body.collect_params().values()]
    keys = [2_000_000 + i for i in range(len(arrays))]
    model.kv.init(keys, arrays)
    model.kv.pushpull(keys, arrays, out=arrays)
    mx.nd.waitall()
    t0 = time.perf_counter()
    for _ in range(reps):
        model.kv.pushpull(keys, arrays, out=arrays)
        mx.nd.waitall()
    return (time.perf_counter() - t0) / reps


def member(framework: str, epochs: int, batch: int, lr: float) -> None:
    """One worker of the gang (started by :func:`run_gang` with its gang environment)."""
    from headrace.trainers.backends import distributed_runtime

    me = GangMember.from_env(os.environ)
    runtime = distributed_runtime(me)
    assert runtime is not None
    x, y = _digits()
    if framework == "tensorflow":
        x = x[..., None]  # NHWC
        model = _tf_model(runtime, lr)
    else:
        x = x[:, None]  # NCHW
        model = _mx_model(runtime, lr)
    import numpy as np

    n = len(x)
    epoch_s: list[float] = []
    losses: list[float] = []
    for epoch in range(epochs):
        order = np.random.default_rng(epoch).permutation(n)
        t0 = time.perf_counter()
        for b in range(0, n, batch):
            idx = order[b:b + batch]
            losses.append(model.fit_batch(x[idx], y[idx]))
        epoch_s.append(time.perf_counter() - t0)
    comm = _tf_comm(model, 20) if framework == "tensorflow" else _mx_comm(model, 20)
    steps = -(-n // batch)
    print(RESULT + json.dumps({
        "worker": me.index, "epoch_s": epoch_s, "steps_per_epoch": steps,
        "comm_s_per_step": comm, "final_loss": losses[-1], "checksum": model.checksum()}),
        flush=True)


def run_gang(framework: str, workers: int, *, epochs: int, batch: int, lr: float,
             cpus: int) -> dict[str, Any]:
    tf = framework == "tensorflow"
    plan = plan_for(framework=framework, strategy="allreduce" if tf else "parameter_server",
                    workers=workers, servers=0 if tf else 1)
    argv = [sys.executable, __file__, "--member", framework, "--epochs", str(epochs),
            "--batch", str(batch), "--lr", str(lr)]
    specs = member_specs(plan, worker_argv=argv, ps_argv=ps_node_command(), cpus=cpus)
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "gang.log"
        with open(log_path, "wb") as log:
            gang = LocalGang(specs, base_env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                              "PYTHONUNBUFFERED": "1"}, log=log)
            while (code := gang.poll()) is None:
                time.sleep(0.2)
        text = log_path.read_text(errors="replace")
    if code != 0:
        raise SystemExit(f"{framework} x{workers} failed ({code}):\n{text[-3000:]}")
    results = [json.loads(line.split(RESULT, 1)[1]) for line in text.splitlines()
               if RESULT in line]
    chief = next(r for r in results if r["worker"] == 0)
    return {"results": results, "chief": chief}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--member", help=argparse.SUPPRESS)
    ap.add_argument("--frameworks", default="tensorflow,mxnet")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64, help="global batch size")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1,
                    help="cores the gang's workers share (threads per worker = cpus/workers)")
    args = ap.parse_args()
    if args.member:
        member(args.member, args.epochs, args.batch, args.lr)
        return
    print(f"digits 1797 samples, global batch {args.batch}, {args.epochs} epochs (the first "
          f"one, with tracing/warm-up, excluded from the median), {args.cpus} cores shared")
    print(f"{'framework':<11}{'workers':>8}{'s/epoch':>10}{'samples/s':>11}{'speed-up':>10}"
          f"{'comm ms/step':>14}{'step ms':>9}{'final loss':>11}  weights equal")
    for fw in args.frameworks.split(","):
        base: float | None = None
        for w in (int(v) for v in args.workers.split(",")):
            out = run_gang(fw, w, epochs=args.epochs, batch=args.batch, lr=args.lr,
                           cpus=args.cpus)
            c = out["chief"]
            steady = c["epoch_s"][1:] or c["epoch_s"]
            epoch_s = statistics.median(steady)
            base = base or epoch_s
            same = len({r["checksum"] for r in out["results"]}) == 1
            print(f"{fw:<11}{w:>8}{epoch_s:>10.2f}{1797 / epoch_s:>11.0f}{base / epoch_s:>9.2f}x"
                  f"{c['comm_s_per_step'] * 1000:>14.2f}"
                  f"{epoch_s / c['steps_per_epoch'] * 1000:>9.1f}{c['final_loss']:>11.4f}  "
                  f"{same} ({len(out['results'])} workers)", flush=True)


if __name__ == "__main__":
    main()
