"""Steps 6 and 7 of a job: evaluate, run the gate (production evaluated on the same validation
rows), publish the version to the model store, then promote it unless that would move
production backwards or the job is a tune trial; status succeeded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headrace.contracts import JobEventKind, JobState, Task, TrainRequested, TriggerKind
from headrace.contracts.gates import Gate, load_gates
from headrace.core.errors import HeadraceError
from headrace.store import versions
from headrace.store.dfs import job_dir, write_atomic
from headrace.store.manifest import MODEL_FORMATS, Manifest
from headrace.store.outcomes import Outcome, Result
from headrace.trainers import cancelling, job_checks, jobs
from headrace.trainers.backends import get_backend
from headrace.trainers.backends.base import Backend, Model
from headrace.trainers.datasets import Dataset, Split
from headrace.trainers.evaluation import Evaluation, baseline, evaluate, render_confusion_png
from headrace.trainers.gate import GateResult, check
from headrace.trainers.history import History
from headrace.trainers.inputs import ModelPlan, export_signature, format_needed, inputs_for
from headrace.trainers.job_run.context import JobContext, fmt, log
from headrace.trainers.promotion import promote


def gate_for(ctx: JobContext) -> Gate:
    """The gate snapshot of this job (taken on its first attempt)."""
    path = job_dir(ctx.root, ctx.job_id) / jobs.GATE
    if path.exists():
        return Gate.model_validate_json(path.read_bytes())
    gate = load_gates(ctx.root, ctx.request.model_name)
    write_atomic(path, gate.model_dump_json(indent=2).encode())
    return gate


def published_version(root: Path, name: str, job_id: str) -> versions.ModelVersion | None:
    for v in reversed(versions.list_versions(root, name)):
        try:
            mv = versions.load_version(root, name, v, verify=False)
        except HeadraceError:
            continue
        if mv.manifest.job_id == job_id:
            return versions.load_version(root, name, v)
    return None


def gate(ctx: JobContext, gate: Gate, ev: Evaluation, ds: Dataset, sp: Split) -> GateResult:
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
                     fmt(prod_ev.metrics))
    base = baseline(task=ctx.request.spec.task, y_train=sp.y_train, y_val=sp.y_val,
                    classes=ds.classes)
    log.info("trivial baseline on the same validation rows: %s", fmt(base.metrics))
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


def publish(ctx: JobContext, model: Model, ds: Dataset, ev: Evaluation, result: GateResult,
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
    # The publish and an operator's cancel race for the job's end: the first claim wins.
    won = cancelling.claim(ctx.root, ctx.job_id, cancelling.Claim(cancelling.PUBLISH))
    if won.by == cancelling.CANCEL:
        raise cancelling.JobCancelled(f"{won.line()}; not publishing")
    mv = versions.publish(ctx.root, manifest, write_files, **kwargs)
    log.info("published %s:%d", mv.name, mv.version)
    return mv


def finish(ctx: JobContext, mv: versions.ModelVersion, result: GateResult, t0: float) -> None:
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
