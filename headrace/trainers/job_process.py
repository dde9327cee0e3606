"""One job, start to end: ``python -m headrace.trainers run JOB_ID`` (a subprocess or a pod).

Steps (each attempt repeats them; every step is safe to repeat):

1. Lock the job directory (one attempt at a time), read ``request.json``.
2. If a version of this job was already published (a crash after publishing), skip to 7.
3. Load and check the dataset; split it (deterministic by seed).
4. Build the model; resume from the last complete checkpoint (the step never goes back).
5. Train: checkpoint every epoch and every ``checkpoint_every_steps``; progress to events.jobs.
6. Evaluate; run the gate (production evaluated on the same validation rows); publish the
   version to the model store (manifest last, gate result inside).
7. If the gate passed: move ``production`` and publish ModelPublished; then status succeeded.

Distributed jobs (``headrace.trainers.distributed``): every worker of the gang runs these steps
with its :class:`GangMember`; only the chief (worker 0) holds the job lock, writes status,
checkpoints, evaluates and publishes; worker ``i`` holds ``.lock-w<i>``. All workers restore
from the same complete checkpoint and log a checksum of their weights after training.

Exit codes (:class:`headrace.trainers.executors.base.ExitCode`): 0 ok, 65 permanent (bad
dataset, spec, gate file or configuration: never retried), 75 retriable (DFS, broker, lock held).
No framework is imported here: backends are loaded by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from headrace.contracts import (
    JobEvent,
    JobEventKind,
    JobState,
    Task,
    TrainRequested,
    TriggerKind,
)
from headrace.contracts.gates import Gate, load_gates
from headrace.core.errors import HeadraceError, PermanentError, RetriableError
from headrace.store import versions
from headrace.store.dfs import job_dir, write_atomic
from headrace.store.manifest import MODEL_FORMATS, Manifest
from headrace.store.outcomes import Outcome, Result
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import (
    checkpoints,
    history,
    job_checks,
    jobs,
    schedule,
    start_check,
    stopping,
)
from headrace.trainers.backends import distributed_runtime, get_backend
from headrace.trainers.backends.base import Backend, DistributedRuntime, Model
from headrace.trainers.datasets import Dataset, Split, load_dataset, split
from headrace.trainers.distributed.heartbeat import Heartbeat
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.distributed.plan import plan_of
from headrace.trainers.distributed.weights import LINE as CHECKSUM_LINE
from headrace.trainers.drift_reference import write_profile
from headrace.trainers.evaluation import Evaluation, baseline, evaluate, render_confusion_png
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.gate import GateResult, check
from headrace.trainers.history import History
from headrace.trainers.inputs import (
    ModelPlan,
    export_signature,
    format_needed,
    inputs_for,
    plan_for,
)
from headrace.trainers.limits import RequestCaps
from headrace.trainers.promotion import promote
from headrace.trainers.run_log import NoRunLog, RunLog, RunLogSettings, run_log_for
from headrace.trainers.tuning import pruning  # noqa: F401  (registers the tune trials' stop rule)

log = logging.getLogger("headrace.job")
LOCK = ".lock"


@dataclass
class JobContext:
    root: Path
    job_id: str
    request: TrainRequested
    sink: EventSink | None
    topics: ControlTopics
    attempt: int = 1
    caps: RequestCaps = field(default_factory=RequestCaps)
    member: GangMember = field(default_factory=GangMember)
    # Run by an executor, which retries or writes the final state; else (by hand) the job
    # writes its own final state: ``status.json`` never stays ``running`` after it.
    supervised: bool = False
    run_log: RunLog = field(default_factory=NoRunLog)  # MLflow where configured (chief only)

    def event(self, kind: JobEventKind, *, wait: bool = True, **fields: Any) -> None:
        if self.sink is None:
            return
        if self.member.distributed:
            fields["worker"] = self.member.index
        ev = JobEvent(job_id=self.job_id, kind=kind, model_name=self.request.model_name,
                      attempt=self.attempt, request_id=self.request.event_id, **fields)
        self.sink.send(self.topics.jobs, ev, key=self.job_id, wait=wait)

    def status(self, **changes: Any) -> None:
        if self.member.chief:  # status.json has one writer
            jobs.update_status(self.root, self.job_id, **changes)


class _EventLogHandler(logging.Handler):
    """Log lines of the job also go to events.jobs (LOG), so operators can follow them."""

    def __init__(self, ctx: JobContext) -> None:
        super().__init__(logging.INFO)
        self.ctx = ctx

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # logging must never fail the job
            self.ctx.event(JobEventKind.LOG, message=self.format(record)[:16_000], wait=False)


def run_job(*, root: Path, job_id: str, conn: KafkaConnection | None,
            topics: ControlTopics = ControlTopics(),
            publish_hook: versions.PublishHook | None = None,
            caps: RequestCaps | None = None,
            member: GangMember = GangMember(), attempt: int | None = None,
            supervised: bool = False, run_log: RunLogSettings | None = None) -> int:
    """Run one job (or this process's share of a distributed one); return its exit code.
    Every failure ends as a one-line reason in ``status.json`` (and a LOG event). Under an
    executor (``supervised``; ``attempt`` is the number it launched) the control plane decides
    retry or FAILED; run by hand, a failure is final: ``status.json`` says failed."""
    _setup_logging()
    try:
        with _locked(root, job_id, member):
            request = jobs.read_request(root, job_id)
            sink = EventSink(conn) if conn is not None else None
            if attempt is None:
                st = jobs.read_status(root, job_id)
                attempt = (st.attempts if st else 0) + (1 if member.chief else 0)
            ctx = JobContext(root, job_id, request, sink, topics, attempt=max(1, attempt),
                             caps=caps or RequestCaps(), member=member, supervised=supervised)
            handler = _EventLogHandler(ctx)
            handler.setFormatter(logging.Formatter("%(message)s"))
            log.addHandler(handler)
            if member.chief:  # a warning in the log is a LOG event on events.jobs too
                ctx.run_log = _run_log(run_log)
            try:
                _run(ctx, publish_hook)
                return ExitCode.OK
            except HeadraceError as exc:
                # Only a transient fault is worth another attempt; a bad spec, dataset or
                # configuration (Permanent or Fatal) fails the same way every time.
                code = ExitCode.RETRIABLE if isinstance(exc, RetriableError) else ExitCode.PERMANENT
                return _fail(ctx, str(exc), code)
            except OSError as exc:
                # Not writable (owner/mode of the DFS volume, a read-only mount) does not heal
                # on a retry: fail the job at once with the reason.
                code = (ExitCode.PERMANENT if jobs.is_permission_error(exc)
                        else ExitCode.RETRIABLE)
                return _fail(ctx, f"filesystem error: {exc}", code)
            except Exception as exc:  # a framework error: keep the traceback in log.txt
                log.exception("unexpected error")
                line = (str(exc).strip().splitlines() or [""])[-1]
                return _fail(ctx, f"{type(exc).__name__}: {line}", ExitCode.RETRIABLE)
            except BaseException:  # Ctrl-C of a job run by hand: it does not stay running
                if not supervised:
                    _fail(ctx, "interrupted", ExitCode.RETRIABLE)
                raise
            finally:
                log.removeHandler(handler)
                if sink is not None:
                    sink.close()
    except PermanentError as exc:  # the request itself is unreadable
        log.error("%s", exc)
        final = {} if supervised else {"state": JobState.FAILED, "finished_at": jobs.now_iso()}
        _best_effort_status(root, job_id, reason=str(exc), exit_code=int(ExitCode.PERMANENT),
                            **final)
        return ExitCode.PERMANENT
    except RetriableError as exc:
        log.error("%s", exc)
        return ExitCode.RETRIABLE


def _run_log(settings: RunLogSettings | None) -> RunLog:
    """The job's run log; a tracker that cannot even be set up is a warning, not a failure."""
    try:
        return run_log_for(settings, log.warning)
    except HeadraceError as exc:
        log.warning("run log: %s; the job goes on without it", exc)
        return NoRunLog()


def _params(req: TrainRequested) -> dict[str, str]:
    """What a run log records as the job's parameters."""
    spec = json.loads(req.spec.model_dump_json())
    out = {k: json.dumps(v) if isinstance(v, dict | list) else str(v) for k, v in spec.items()}
    out.update(framework=str(req.framework), dataset=req.dataset_uri,
               **{f"hp.{k}": str(v) for k, v in req.hyperparameters.items()})
    return out


def _fail(ctx: JobContext, reason: str, code: int) -> int:
    # Keep every line: a bad gates file names each of its errors on a line of its own.
    reason = "\n".join(reason.strip().splitlines()[:20]) if reason.strip() else "failed"
    log.error("attempt %d failed: %s", ctx.attempt, reason)
    ctx.run_log.failed(reason)
    if not ctx.member.chief:
        return code
    final = {} if ctx.supervised else {"state": JobState.FAILED, "finished_at": jobs.now_iso()}
    _best_effort_status(ctx.root, ctx.job_id, reason=reason, exit_code=int(code), **final)
    return code


def _best_effort_status(root: Path, job_id: str, **changes: Any) -> None:
    with contextlib.suppress(Exception):  # reporting a failure must not mask it
        jobs.update_status(root, job_id, **changes)


def _setup_logging() -> None:
    if not log.handlers:
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False


def lock_name(member: GangMember) -> str:
    """The chief holds the job's lock (one attempt at a time); worker i holds its own."""
    return LOCK if member.chief else f"{LOCK}-w{member.index}"


@contextmanager
def _locked(root: Path, job_id: str, member: GangMember = GangMember()) -> Iterator[None]:
    d = job_dir(root, job_id)
    if not d.is_dir():
        raise PermanentError(f"job {job_id} does not exist")
    fd = os.open(d / lock_name(member), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = "" if member.chief else f" (worker {member.index})"
            raise RetriableError(f"job {job_id} is running elsewhere (lock held){who}") from None
        yield
    finally:
        os.close(fd)


def _run(ctx: JobContext, publish_hook: versions.PublishHook | None) -> None:
    req, root = ctx.request, ctx.root
    t0 = time.time()
    plan = plan_of(req)  # ValidationFailed: a combination that cannot run (permanent)
    m = ctx.member
    if plan.distributed != m.distributed or (plan.distributed and plan.workers != m.workers):
        raise PermanentError(f"job {ctx.job_id} needs {plan.workers} worker(s) "
                             f"({plan.strategy}) but was started as worker {m.index} of "
                             f"{m.workers} ({m.strategy}): its executor does not run this gang")
    runtime = distributed_runtime(ctx.member, req.framework)  # before the framework runs
    ctx.status(state=JobState.RUNNING, attempts=ctx.attempt, reason=None, exit_code=None,
               started_at=jobs.now_iso())
    log.info("attempt %d running (pid %d)%s", ctx.attempt, os.getpid(),
             f"; {plan.strategy} worker {ctx.member.index} of {plan.workers}"
             if runtime is not None else "")
    existing = _published_version(root, req.model_name, ctx.job_id)
    if not ctx.member.chief:
        if existing is None:
            _train_worker(ctx, runtime, req)
        return
    threading.Thread(target=_warm_plotting, daemon=True).start()
    gate = _gate_for(ctx)
    if existing is not None:
        log.info("version %d of this job is already published; finishing its promotion",
                 existing.version)
        Heartbeat(root, ctx.job_id, m.tag).done()  # no step is due: past start-up
        result = GateResult.model_validate(existing.manifest.extra.get("gate", {"passed": False}))
        _finish(ctx, existing, result, t0)
        return
    ds, sp, model, model_plan = _build(ctx, runtime, req)
    ctx.run_log.started(job_id=ctx.job_id, model_name=req.model_name, params=_params(req))
    log.info("dataset %s: %d rows, inputs %s, %s; model %s on %s", req.dataset_uri, ds.rows,
             ", ".join(f"{i.name} ({i.kind.value})" for i in model_plan.inputs),
             f"classes {list(ds.classes)}" if ds.classes else "regression", model_plan.family,
             model.device)
    # A gang's chief shares its optimizer state with the gang (a parameter server's lives
    # there): only a single-process job saves and reloads its start.
    start = None if m.distributed else model_plan.linear_start or model_plan.alternative
    hist = _train(ctx, model, sp,
                  save_start=None if start is None else _start_saver(
                      req, model, model_plan, len(ds.features)))
    if start is not None:
        _check_start(ctx, model, sp, hist, start.kind)
    val_outputs = model.predict(sp.x_val)
    ev = evaluate(task=req.spec.task, outputs=val_outputs, y=sp.y_val, classes=ds.classes)
    log.info("validation: %s", _fmt(ev.metrics))
    result = _gate(ctx, gate, ev, ds, sp)
    mv = _publish(ctx, model, ds, ev, result, publish_hook, model_plan, hist,
                  plan.record() if plan.distributed else None,
                  drift=lambda d: write_profile(d, spec=req.spec, plan=model_plan,
                                                x_train=sp.x_train, val_outputs=val_outputs,
                                                classes=ds.classes))
    _finish(ctx, mv, result, t0)


def _build(ctx: JobContext, runtime: DistributedRuntime | None, req: TrainRequested
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


def _train_worker(ctx: JobContext, runtime: DistributedRuntime | None,
                  req: TrainRequested) -> None:
    """A non-chief worker: train its shard in step with the gang, nothing else."""
    _, sp, model, _ = _build(ctx, runtime, req)
    _train(ctx, model, sp)


def _warm_plotting() -> None:
    # Import matplotlib while training runs: it is needed only to render the PNG at the end.
    with contextlib.suppress(Exception):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot


def _gate_for(ctx: JobContext) -> Gate:
    """The gate snapshot of this job (taken on its first attempt)."""
    path = job_dir(ctx.root, ctx.job_id) / jobs.GATE
    if path.exists():
        return Gate.model_validate_json(path.read_bytes())
    gate = load_gates(ctx.root, ctx.request.model_name)
    write_atomic(path, gate.model_dump_json(indent=2).encode())
    return gate


def _published_version(root: Path, name: str, job_id: str) -> versions.ModelVersion | None:
    for v in reversed(versions.list_versions(root, name)):
        try:
            mv = versions.load_version(root, name, v, verify=False)
        except HeadraceError:
            continue
        if mv.manifest.job_id == job_id:
            return versions.load_version(root, name, v)
    return None


def _start_saver(req: TrainRequested, model: Model, plan: ModelPlan, n_features: int
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


def _train(ctx: JobContext, model: Model, sp: Split, *,
           save_start: Callable[[Path], None] | None = None) -> History:
    """Epochs until a stop rule says so (early stopping first) or ``spec.epochs``; the best
    epoch's weights are restored at the end (chief: what is evaluated and published).
    ``save_start``: keep the start's weights before the first epoch too (``_check_start``)."""
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
    rules = stopping.rules_for(req)
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
        log.info("epoch %d/%d step %d: %s", epoch + 1, spec.epochs, step, _fmt(metrics))
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


def _check_start(ctx: JobContext, model: Model, sp: Split, hist: History, kind: str) -> None:
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


def _gate(ctx: JobContext, gate: Gate, ev: Evaluation, ds: Dataset, sp: Split) -> GateResult:
    """Check the gate; production is evaluated on this job's validation rows."""
    name = ctx.request.model_name
    prod_ev: Evaluation | None = None
    prod_version: int | None = None
    try:
        prod = versions.resolve(ctx.root, f"{name}@{versions.PRODUCTION}")
    except versions.VersionNotFound:
        prod = None
    if prod is not None and gate.max_regression:
        prod_ev = _evaluate_version(prod, ds, sp)
        prod_version = prod.version
        if prod_ev is not None:
            log.info("production v%d on the same validation rows: %s", prod.version,
                     _fmt(prod_ev.metrics))
    base = baseline(task=ctx.request.spec.task, y_train=sp.y_train, y_val=sp.y_val,
                    classes=ds.classes)
    log.info("trivial baseline on the same validation rows: %s", _fmt(base.metrics))
    result = check(gate, ev, prod_ev, prod_version, baseline=base)
    if result.passed:
        log.info("gate passed")
    else:
        log.warning("gate failed: %s", "; ".join(result.reasons))
    return result


def _evaluate_version(mv: versions.ModelVersion, ds: Dataset, sp: Split) -> Evaluation | None:
    m = mv.manifest
    if m.task != ctx_task(ds) or m.classes != ds.classes or m.label != ds.label:
        log.warning("production v%d is not comparable (task, label or classes differ)", mv.version)
        return None
    x_val = inputs_for(sp.x_val, m.input_signature())
    if x_val is None:
        log.warning("production v%d takes inputs this dataset lacks", mv.version)
        return None
    backend: Backend = get_backend(m.framework)
    predictor = backend.load_exported(mv.path, task=m.task, n_features=len(m.features),
                                      signature=m.input_signature())
    return evaluate(task=m.task, outputs=predictor.predict(x_val), y=sp.y_val,
                    classes=ds.classes)


def ctx_task(ds: Dataset) -> Task:
    return Task.CLASSIFIER if ds.classes else Task.REGRESSOR


def _publish(ctx: JobContext, model: Model, ds: Dataset, ev: Evaluation, result: GateResult,
             hook: versions.PublishHook | None, model_plan: ModelPlan, hist: History,
             gang: dict[str, object] | None = None,
             drift: Callable[[Path], object] | None = None) -> versions.ModelVersion:
    req = ctx.request
    inputs = export_signature(model_plan, req.framework)
    manifest = Manifest(
        format_version=format_needed(inputs),
        name=req.model_name, framework=req.framework, task=req.spec.task,
        features=ds.features, label=ds.label, classes=ds.classes, metrics=ev.metrics,
        inputs=inputs, outputs=model_plan.outputs,
        family=model_plan.family, model_format=MODEL_FORMATS.get(req.framework, ""),
        confusion_matrix=ev.confusion_matrix, dataset=ds.identity,
        trigger_event_id=req.event_id, job_id=ctx.job_id,
        extra={"gate": result.model_dump(), "spec": json.loads(req.spec.model_dump_json()),
               "trigger": json.loads(req.trigger.model_dump_json()),
               "hyperparameters": dict(req.hyperparameters), "training": hist.record(),
               **job_checks.manifest_extra(req),
               **({"distributed": gang} if gang else {})},
        **job_checks.manifest_fields(req))

    def write_files(d: Path) -> None:
        model.export(d)
        (d / "metrics.json").write_bytes(ev.to_json())
        if drift is not None:
            drift(d)  # drift_profile.json (trainers.drift_reference)
        if ev.classes:
            render_confusion_png(ev, d / "confusion_matrix.png",
                                 title=f"{req.model_name} (job {ctx.job_id})")

    kwargs: dict[str, Any] = {} if hook is None else {"hook": hook}
    mv = versions.publish(ctx.root, manifest, write_files, **kwargs)
    log.info("published %s:%d", mv.name, mv.version)
    return mv


def _finish(ctx: JobContext, mv: versions.ModelVersion, result: GateResult, t0: float) -> None:
    promoted = False
    held = _held_back(ctx.root, mv) if result.passed and result.promote else None
    if held is None and result.passed and result.promote and _is_trial(ctx.request):
        # A study promotes only its best trial, at its end: production stays put meanwhile.
        held = (f"{mv.name}:{mv.version} not promoted: a trial of study "
                f"{ctx.request.trigger.source} (the study promotes its best trial at its end)")
    if held is not None:
        # A re-run of a finished job (or a late retry) must never move production backwards.
        log.info("%s", held)
        result = result.model_copy(update={"promote": False, "reasons": [held]})
    if result.passed and result.promote:
        current = versions.read_alias(ctx.root, mv.name)
        if current is None or current.version != mv.version:
            if ctx.sink is not None:
                promote(root=ctx.root, sink=ctx.sink, topic=ctx.topics.models, name=mv.name,
                        version=mv.version, job_id=ctx.job_id, reason=f"job {ctx.job_id}")
            else:
                versions.set_alias(ctx.root, mv.name, mv.version, reason=f"job {ctx.job_id}")
        promoted = True
        log.info("promoted %s:%d to production", mv.name, mv.version)
    elif result.passed:
        log.info("gate passed; promotion is off for this model (promote: false)")
    refused = not result.passed
    said = Outcome(Result.PROMOTED if promoted else Result.REFUSED if refused else Result.KEPT,
                   "" if promoted else "; ".join(result.reasons) or "promotion off")
    msg = f"{mv.name}:{mv.version} {said.line()}"  # the words every view uses (store/outcomes)
    ctx.status(state=JobState.SUCCEEDED, finished_at=jobs.now_iso(), version=mv.version,
               promoted=promoted, gate_reasons=list(result.reasons),
               result=said.result.value, held_by=list(result.held_by),
               metrics={k: float(v) for k, v in mv.manifest.metrics.items()},
               reason="; ".join(result.reasons) if refused else None, exit_code=0)
    ctx.event(JobEventKind.SUCCEEDED, message=msg,
              metrics={k: float(v) for k, v in mv.manifest.metrics.items() if "." not in k},
              reason=None if promoted else said.line())
    ctx.run_log.published(mv, gate=result.model_dump(), outcome=said.result.value)
    log.info("done in %.1fs: %s", time.time() - t0, msg)


def _is_trial(req: TrainRequested) -> bool:
    return req.trigger.kind == TriggerKind.TUNE


def _held_back(root: Path, mv: versions.ModelVersion) -> str | None:
    """Why promoting ``mv`` now would move production backwards, or None if it would not."""
    current = versions.read_alias(root, mv.name)
    if current is None or current.version == mv.version:
        return None
    ref = f"{mv.name}:{mv.version}"
    if current.version > mv.version:
        why = f"production is at the newer {mv.name}:{current.version}"
    elif any(p.version == mv.version for p in versions.alias_history(root, mv.name)):
        why = (f"{ref} was production before and was moved away from; production is at "
               f"{mv.name}:{current.version}")
    else:
        return None
    return (f"{ref} not promoted: {why}; a re-run never moves production backwards "
            f"(`headrace models promote {ref}` does it on purpose)")


def _fmt(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items()) if "." not in k)

