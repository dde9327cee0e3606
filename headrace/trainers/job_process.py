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
No framework is imported here: backends are loaded by name. The steps live in
:mod:`headrace.trainers.job_run` (training: 3 to 5; publishing: 6 and 7); this module locks,
runs and fails the job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from headrace.contracts import JobState, TrainRequested
from headrace.core.errors import HeadraceError, PermanentError, RetriableError
from headrace.store import versions
from headrace.store.dfs import job_dir
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs, stopping
from headrace.trainers.backends import distributed_runtime
from headrace.trainers.distributed.heartbeat import Heartbeat
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.distributed.plan import plan_of
from headrace.trainers.drift_reference import write_profile
from headrace.trainers.evaluation import evaluate
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.gate import GateResult
from headrace.trainers.job_run import publishing, training
from headrace.trainers.job_run.context import EventLogHandler, JobContext, fmt, log
from headrace.trainers.limits import RequestCaps
from headrace.trainers.run_log import NoRunLog, RunLog, RunLogSettings, run_log_for

LOCK = ".lock"


def run_job(*, root: Path, job_id: str, conn: KafkaConnection | None,
            topics: ControlTopics = ControlTopics(),
            publish_hook: versions.PublishHook | None = None,
            caps: RequestCaps | None = None,
            member: GangMember = GangMember(), attempt: int | None = None,
            supervised: bool = False,
            stop_rules: Sequence[stopping.StopRuleFactory] = (),
            run_log: RunLogSettings | None = None) -> int:
    """Run one job (or this process's share of a distributed one); return its exit code.
    Every failure ends as a one-line reason in ``status.json`` (and a LOG event). Under an
    executor (``supervised``; ``attempt`` is the number it launched) the control plane decides
    retry or FAILED; run by hand, a failure is final: ``status.json`` says failed.
    ``stop_rules``: the rules asked after each epoch besides early stopping (the entry points
    pass :data:`headrace.trainers.stop_rules.FACTORIES`)."""
    _setup_logging()
    try:
        with _locked(root, job_id, member):
            request = jobs.read_request(root, job_id)
            sink = EventSink(conn) if conn is not None else None
            if attempt is None:
                st = jobs.read_status(root, job_id)
                attempt = (st.attempts if st else 0) + (1 if member.chief else 0)
            ctx = JobContext(root, job_id, request, sink, topics, attempt=max(1, attempt),
                             caps=caps or RequestCaps(), member=member, supervised=supervised,
                             stop_rules=stop_rules)
            handler = EventLogHandler(ctx)
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
    existing = publishing.published_version(root, req.model_name, ctx.job_id)
    if not ctx.member.chief:
        if existing is None:
            training.train_worker(ctx, runtime, req)
        return
    threading.Thread(target=_warm_plotting, daemon=True).start()
    gate = publishing.gate_for(ctx)
    if existing is not None:
        log.info("version %d of this job is already published; finishing its promotion",
                 existing.version)
        Heartbeat(root, ctx.job_id, m.tag).done()  # no step is due: past start-up
        result = GateResult.model_validate(existing.manifest.extra.get("gate", {"passed": False}))
        publishing.finish(ctx, existing, result, t0)
        return
    ds, sp, model, model_plan = training.build(ctx, runtime, req)
    ctx.run_log.started(job_id=ctx.job_id, model_name=req.model_name, params=_params(req))
    log.info("dataset %s: %d rows, inputs %s, %s; model %s on %s", req.dataset_uri, ds.rows,
             ", ".join(f"{i.name} ({i.kind.value})" for i in model_plan.inputs),
             f"classes {list(ds.classes)}" if ds.classes else "regression", model_plan.family,
             model.device)
    # A gang's chief shares its optimizer state with the gang (a parameter server's lives
    # there): only a single-process job saves and reloads its start.
    start = None if m.distributed else model_plan.linear_start or model_plan.alternative
    hist = training.train(ctx, model, sp,
                  save_start=None if start is None else training.start_saver(
                      req, model, model_plan, len(ds.features)))
    if start is not None:
        training.check_start(ctx, model, sp, hist, start.kind)
    val_outputs = model.predict(sp.x_val)
    ev = evaluate(task=req.spec.task, outputs=val_outputs, y=sp.y_val, classes=ds.classes)
    log.info("validation: %s", fmt(ev.metrics))
    result = publishing.gate(ctx, gate, ev, ds, sp)
    mv = publishing.publish(ctx, model, ds, ev, result, publish_hook, model_plan, hist,
                  plan.record() if plan.distributed else None,
                  drift=lambda d: write_profile(d, spec=req.spec, plan=model_plan,
                                                x_train=sp.x_train, val_outputs=val_outputs,
                                                classes=ds.classes))
    publishing.finish(ctx, mv, result, t0)


def _warm_plotting() -> None:
    # Import matplotlib while training runs: it is needed only to render the PNG at the end.
    with contextlib.suppress(Exception):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot


