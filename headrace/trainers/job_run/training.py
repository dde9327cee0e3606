"""Steps 3 to 5 of a job: load and split the dataset, build the model (resumed from its last
complete checkpoint), train epoch by epoch until a stop rule says so, then restore the best
epoch (or keep the start when training did not beat it).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import JobEventKind, Task, TrainRequested
from headrace.trainers import (
    checkpoints,
    history,
    job_checks,
    jobs,
    schedule,
    start_check,
    stopping,
)
from headrace.trainers.backends import get_backend
from headrace.trainers.backends.base import DistributedRuntime, Model
from headrace.trainers.datasets import Dataset, Split, load_dataset, split
from headrace.trainers.distributed.heartbeat import Heartbeat
from headrace.trainers.distributed.weights import LINE as CHECKSUM_LINE
from headrace.trainers.evaluation import evaluate
from headrace.trainers.history import History
from headrace.trainers.inputs import ModelPlan, plan_for
from headrace.trainers.job_run.context import JobContext, fmt, log


def build(ctx: JobContext, runtime: DistributedRuntime | None, req: TrainRequested
           ) -> tuple[Dataset, Split, Model, ModelPlan]:
    """Load and split the dataset, plan the model's inputs and outputs, build the model
    (inside the distributed scope)."""
    job_checks.before_dataset(ctx.root, req, ctx.caps)
    ds = load_dataset(root=ctx.root, uri=req.dataset_uri, spec=req.spec)
    sp = split(ds, validation_split=req.spec.validation_split, seed=req.spec.seed)
    job_checks.after_split(req, sp)
    backend = get_backend(req.framework)  # the framework first: user code imports it
    job_checks.load_code(ctx.root, req, ds)
    model_plan = plan_for(spec=req.spec, x_train=sp.x_train, y_train=sp.y_train,
                          classes=ds.classes, root=ctx.root)
    with runtime.scope() if runtime is not None else contextlib.nullcontext():
        model = backend.create(spec=req.spec, n_features=len(ds.features),
                               n_outputs=model_plan.n_outputs, seed=req.spec.seed,
                               plan=model_plan)
    job_checks.after_build(model, sp, ctx.caps)
    return ds, sp, model if runtime is None else runtime.wrap(model), model_plan


def train_worker(ctx: JobContext, runtime: DistributedRuntime | None,
                  req: TrainRequested) -> None:
    """A non-chief worker: train its shard in step with the gang, nothing else."""
    _, sp, model, _ = build(ctx, runtime, req)
    train(ctx, model, sp)


def start_saver(req: TrainRequested, model: Model, plan: ModelPlan, n_features: int
                 ) -> Callable[[Path], None]:
    """What writes the start's checkpoint: the model's own weights before its first epoch
    (ridge), or those of a second build that is the plan's alternative (the text family's
    n-gram logistic regression: same layers, so the trained model can load it)."""
    if plan.linear_start is not None:
        return model.save_checkpoint
    other = get_backend(req.framework).create(
        spec=req.spec, n_features=n_features, n_outputs=plan.n_outputs,
        seed=req.spec.seed, plan=dataclasses.replace(plan, linear_start=plan.alternative,
                                                     alternative=None))
    return other.save_checkpoint


def train(ctx: JobContext, model: Model, sp: Split, *,
           save_start: Callable[[Path], None] | None = None) -> History:
    """Epochs until a stop rule says so (early stopping first) or ``spec.epochs``; the best
    epoch's weights are restored at the end (chief: what is evaluated and published).
    ``save_start``: keep the start's weights before the first epoch too (``check_start``)."""
    req = ctx.request
    spec = req.spec
    chief = ctx.member.chief
    ckdir = jobs.checkpoints_dir(ctx.root, ctx.job_id)
    if chief:
        checkpoints.sweep(ckdir)
    step, epoch0, batch0 = 0, 0, 0
    found = checkpoints.latest(ckdir)
    if found is not None:
        path, state = found
        model.load_checkpoint(path)
        step, epoch0, batch0 = state.step, state.epoch, state.batch
        log.info("resumed from checkpoint at step %d (epoch %d, batch %d)", step, epoch0, batch0)
    elif chief and save_start is not None:
        history.save_best(ctx.root, ctx.job_id, 0, save_start, which=history.START)
    n = len(sp.x_train)
    bs = schedule.batch_size(spec, n, ctx.member.workers)
    n_batches = (n + bs - 1) // bs
    hist = history.read(ctx.root, ctx.job_id, upto=epoch0)
    hist.batch_size = bs
    rules = stopping.rules_for(req, ctx.stop_rules)
    lr = schedule.LearningRate(spec)
    for rule in rules:  # a resumed job catches up on the epochs it ran
        replay = getattr(rule, "replay", None)
        if replay is not None:
            replay(hist.epochs)
    rate = lr.replay(hist.epochs)
    log.info("training up to %d epochs, batch size %d (%d steps per epoch), learning rate "
             "%.2g (%s), early stopping after %d epochs without a better validation loss",
             spec.epochs, bs, n_batches, rate, spec.lr_schedule, spec.patience)
    loss = float("nan")
    beat = Heartbeat(ctx.root, ctx.job_id, ctx.member.tag)  # the executor's watchdog reads it
    stopped = stopping.MAX_EPOCHS
    done = history.read(ctx.root, ctx.job_id)
    end = spec.epochs
    if done.stopped_because and batch0 == 0 and len(done.epochs) == epoch0 == len(hist.epochs):
        # A retry after training ended (a crash before publishing): no more epochs.
        stopped, end = done.stopped_because, epoch0
    for epoch in range(epoch0, end):
        _set_learning_rate(model, rate)
        order = np.random.default_rng(spec.seed * 100_003 + epoch).permutation(n)
        losses: list[float] = []
        for b in range(batch0 if epoch == epoch0 else 0, n_batches):
            idx = order[b * bs:(b + 1) * bs]
            loss = model.fit_batch(sp.x_train[idx], sp.y_train[idx])
            losses.append(loss)
            step += 1
            beat()
            every = spec.checkpoint_every_steps
            if chief and every and step % every == 0 and b + 1 < n_batches:
                checkpoints.save(ckdir, checkpoints.CheckpointState(step, epoch, b + 1, loss),
                                 model.save_checkpoint)
        val = evaluate(task=spec.task, outputs=model.predict(sp.x_val), y=sp.y_val,
                       classes=_classes_of(sp, spec.task, model))
        metrics = {"loss": float(np.mean(losses)) if losses else loss,
                   **{f"val_{k}": v for k, v in val.metrics.items() if "." not in k}}
        row = {"epoch": float(epoch + 1), **metrics, "learning_rate": rate}
        is_best = hist.add(row)
        reason = next((r for r in (rule.after_epoch(epoch + 1, metrics) for rule in rules)
                       if r is not None), None)
        rate = lr.after_epoch(metrics)
        if chief:
            # Curve and best weights before the checkpoint: a resume re-runs this epoch.
            history.write(ctx.root, ctx.job_id, hist)
            if is_best:
                history.save_best(ctx.root, ctx.job_id, epoch + 1, model.save_checkpoint)
            # End of epoch: the checkpoint names the next epoch with no batch done.
            checkpoints.save(ckdir, checkpoints.CheckpointState(step, epoch + 1, 0, loss),
                             model.save_checkpoint)
        log.info("epoch %d/%d step %d: %s", epoch + 1, spec.epochs, step, fmt(metrics))
        ctx.status(epoch=epoch + 1, step=step, metrics=metrics)
        if chief:
            ctx.event(JobEventKind.PROGRESS, epoch=epoch + 1, step=step, metrics=metrics,
                      message=f"epoch {epoch + 1}/{spec.epochs}")
            ctx.run_log.epoch(epoch + 1, {**metrics, "learning_rate": rate})
        if reason is not None:
            stopped = reason
            break
    hist.stopped_because = stopped
    beat.done()
    if ctx.member.distributed:
        log.info("%s %s at step %d", CHECKSUM_LINE,
                 model.checksum(), step)  # type: ignore[attr-defined]
    if chief:
        _restore_best(ctx, model, hist)
        history.write(ctx.root, ctx.job_id, hist)
    return hist


def _restore_best(ctx: JobContext, model: Model, hist: History) -> None:
    last = int(hist.epochs[-1]["epoch"]) if hist.epochs else 0
    log.info("stopped after %d epochs (%s); best epoch %d", len(hist.epochs),
             hist.stopped_because, hist.best_epoch)
    if not hist.best_epoch or hist.best_epoch == last:
        return
    best = history.best_path(ctx.root, ctx.job_id, hist.best_epoch)
    if best is None:
        log.warning("weights of best epoch %d are missing; publishing epoch %d",
                    hist.best_epoch, last)
        hist.best_epoch = last
        return
    model.load_checkpoint(best)
    log.info("restored the weights of epoch %d", hist.best_epoch)


def check_start(ctx: JobContext, model: Model, sp: Split, hist: History, kind: str) -> None:
    """Publish the start (``kind``: ridge, or the text family's n-gram logistic regression)
    instead of the trained network unless training beat it on the validation rows by more than
    one standard error (``start_check``)."""
    start = history.best_path(ctx.root, ctx.job_id, 0, which=history.START)
    best = history.best_path(ctx.root, ctx.job_id, hist.best_epoch)
    if start is None or best is None:
        log.warning("the start's or the best epoch's weights are missing: publishing the "
                    "trained model unchecked")
        return
    trained = model.predict(sp.x_val)
    model.load_checkpoint(start)
    check = start_check.compare(sp.y_val, model.predict(sp.x_val), trained,
                                classifier=ctx.request.spec.task == Task.CLASSIFIER)
    if check.kept == start_check.TRAINED:
        model.load_checkpoint(best)
    hist.start_check = check.record()
    history.write(ctx.root, ctx.job_id, hist)
    log.info("validation: training %s its start (%s) by %.4g (%s, one standard error "
             "%.4g, %d rows): publishing the %s model", "beat" if check.gain > 0 else
             "did not beat", kind, abs(check.gain), check.loss, check.se, check.rows,
             check.kept)


def _set_learning_rate(model: Model, rate: float) -> None:
    # A distributed wrapper trains its inner model's optimiser.
    target: Any = getattr(model, "inner", model)
    target.set_learning_rate(rate)


def _classes_of(sp: Split, task: Task, model: Model) -> tuple[str, ...]:
    if task != Task.CLASSIFIER:
        return ()
    k = model.predict(sp.x_val[:1]).shape[1]
    return tuple(str(i) for i in range(k))
