"""Run a study: every trial is an ordinary Headrace job.

The loop (``run_study``) asks Optuna for a trial, publishes its TrainRequested on
events.train-requests (trigger ``tune``, source the study, slot the trial number, idempotency
key ``tune:<study>:<trial>``), keeps up to ``parallel`` trials in flight, reads each trial's
result from its job's ``status.json`` and tells the study. The control plane and its executor
(local processes or Kubernetes Jobs) run the trials like any other job, gate included.

Resumable: the study lives in its journal on the DFS. A trial asked but not told is in flight;
a new run of the same study republishes its request only if its job does not exist yet (the
key dedups anyway) and waits for it, so a restart (of this loop or of the control plane)
neither runs a trial twice nor loses a finished one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.trial import FrozenTrial, TrialState

from headrace.contracts import FINAL_STATES, JobState, TrainRequested, TriggerKind, parse
from headrace.core.errors import HeadraceError, PermanentError, RetriableError
from headrace.store import versions
from headrace.store.dfs import job_dir
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics
from headrace.trainers import api, jobs, promotion
from headrace.trainers.distributed.plan import plan_of
from headrace.trainers.limits import RequestCaps
from headrace.trainers.tuning import storage
from headrace.trainers.tuning.pruning import PRUNED
from headrace.trainers.tuning.space import Space, parse_space
from headrace.trainers.tuning.storage import StudyConfig

HISTORY = "history.json"  # the job's training history (stopped_because: "pruned", ...)
DONE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass(frozen=True)
class TrialRow:
    """One trial as ``tune show`` prints it."""

    number: int
    state: str  # running, complete, pruned, fail
    params: dict[str, Any]
    value: float | None
    job_id: str
    job_state: str | None = None
    version: int | None = None
    promoted: bool | None = None
    reason: str | None = None
    epochs: int | None = None


@dataclass(frozen=True)
class StudyResult:
    config: StudyConfig
    trials: list[TrialRow]
    best: TrialRow | None = None
    promoted_best: bool = False
    notes: list[str] = field(default_factory=list)


def trial_key(study: str, number: int) -> str:
    return f"tune:{study}:{number}"


def trial_request(config: StudyConfig, space: Space, number: int,
                  params: dict[str, Any]) -> TrainRequested:
    """Trial ``number``'s TrainRequested (``ValidationFailed`` with one line if invalid)."""
    spec = {**config.params, **space.spec_values(params), "model": config.model,
            "task": config.task.value, "label": config.label, "epochs": config.epochs,
            "seed": config.seed}
    request = parse(TrainRequested, {
        "idempotency_key": trial_key(config.name, number), "model_name": config.model_name,
        "framework": config.framework.value, "dataset_uri": config.dataset_uri, "spec": spec,
        "trigger": {"kind": TriggerKind.TUNE.value, "source": config.name,
                    "slot": str(number)}})
    plan_of(request)
    return request


def check_study(*, root: Path, config: StudyConfig, caps: RequestCaps | None = None) -> Space:
    """Refuse a bad study with one line before anything runs: the space, the fixed params,
    the request caps and the code, and a resumed study searching something else."""
    space = parse_space(config.space)
    api.admit_request(request=trial_request(config, space, 0, {}), root=root,
                      caps=caps or RequestCaps())
    existing = storage.read_config(root, config.name) if root.is_dir() else None
    if existing is not None and not existing.same_search(config):
        raise PermanentError(f"study {config.name} exists with other settings (see "
                             f"`headrace tune show {config.name}`): use another name")
    return space


def run_study(*, root: Path, conn: KafkaConnection, config: StudyConfig, trials: int,
              parallel: int = 1, topics: ControlTopics = ControlTopics(),
              caps: RequestCaps | None = None, durability: api.Durability = None,
              poll_s: float = 1.0, timeout_s: float = 24 * 3600.0, promote_best: bool = True,
              on_trial: Callable[[TrialRow], None] | None = None) -> StudyResult:
    """Run (or resume) ``config``'s study until ``trials`` trials have ended; return it.

    ``on_trial`` sees each trial as it is started and as it ends. With ``promote_best`` the
    best trial's version is made production at the end if its own gate let it be promoted
    and a later trial's version took its place."""
    if trials < 1 or parallel < 1:
        raise PermanentError("--trials and --parallel must be at least 1")
    space = check_study(root=root, config=config, caps=caps)
    config = storage.write_config(root, config)
    with storage.runner_lock(root, config.name):
        result = _run(root, conn, config, space, trials, parallel, topics, durability, poll_s,
                      timeout_s, on_trial)
    if promote_best and result.best is not None and cancelled(root, config.name) is None:
        return _promote_best(root, conn, topics, result)
    return result


def _run(root: Path, conn: KafkaConnection, config: StudyConfig, space: Space, trials: int,
         parallel: int, topics: ControlTopics, durability: api.Durability, poll_s: float,
         timeout_s: float, on_trial: Callable[[TrialRow], None] | None) -> StudyResult:
    journal = storage.journal(root, config.name)
    study = storage.load_study(root, config, journal)
    tracker = _Tracker(study, journal)
    inflight: dict[int, str] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        inflight[t.number] = _publish(root, conn, topics, durability,
                                      trial_request(config, space, t.number, t.params))
    deadline = time.monotonic() + timeout_s
    while True:
        for number, job_id in list(inflight.items()):
            row = _finish(root, tracker, config, number, job_id)
            if row is not None:
                del inflight[number]
                if on_trial:
                    on_trial(row)
        asked = len(study.get_trials(deepcopy=False))
        if cancelled(root, config.name) is not None:
            asked = trials  # cancelled: no new trial; the running ones end CANCELLED
        while len(inflight) < parallel and asked < trials:
            trial = study.ask(space.distributions)
            request = trial_request(config, space, trial.number, trial.params)
            trial.set_user_attr("job_id", api.job_id_of(request))
            inflight[trial.number] = _publish(root, conn, topics, durability, request)
            asked += 1
            if on_trial:
                on_trial(TrialRow(trial.number, "running", dict(trial.params), None,
                                  inflight[trial.number]))
        if not inflight:
            break
        if time.monotonic() > deadline:
            raise RetriableError(f"study {config.name}: {len(inflight)} trial(s) still running "
                                 f"after {timeout_s:.0f}s; run the same command again to "
                                 "resume it")
        time.sleep(poll_s)
    return show_study(root=root, name=config.name)


def _publish(root: Path, conn: KafkaConnection, topics: ControlTopics,
             durability: api.Durability, request: TrainRequested) -> str:
    job_id = api.job_id_of(request)
    if not (job_dir(root, job_id) / jobs.REQUEST).exists():  # the key dedups a republish too
        api.request_training(conn=conn, request=request, topics=topics, durability=durability)
    return job_id


@dataclass(frozen=True)
class _Tracker:
    """The study and its storage: trial attributes are written through the storage."""

    study: optuna.Study
    journal: JournalStorage

    def set_attr(self, number: int, key: str, value: Any) -> None:
        study_id = self.journal.get_study_id_from_name(self.study.study_name)
        trial_id = self.journal.get_trial_id_from_study_id_trial_number(study_id, number)
        self.journal.set_trial_user_attr(trial_id, key, value)

    def trial(self, number: int) -> FrozenTrial:
        return next(t for t in self.study.get_trials(deepcopy=False) if t.number == number)


def _finish(root: Path, tracker: _Tracker, config: StudyConfig, number: int,
            job_id: str) -> TrialRow | None:
    """Tell the study how trial ``number`` ended, if its job has ended; else None."""
    try:
        st = jobs.read_status(root, job_id)
    except RetriableError:
        return None  # being rewritten: read it next time
    if st is None or st.state not in FINAL_STATES:
        return None
    if tracker.trial(number).state in DONE:  # told already (by an earlier run)
        return _row(root, tracker.trial(number))
    value = st.metrics.get(config.metric)
    study = tracker.study
    for key, attr in (("job_id", job_id), ("job_state", st.state.value), ("version", st.version),
                      ("promoted", st.promoted), ("reason", st.reason)):
        tracker.set_attr(number, key, attr)
    stopped = _history(root, job_id).get("stopped_because")
    if st.state in (JobState.FAILED, JobState.CANCELLED):
        study.tell(number, state=TrialState.FAIL)
    elif value is None:
        tracker.set_attr(number, "reason", f"the job's metrics have no {config.metric!r}")
        study.tell(number, state=TrialState.FAIL)
    elif stopped == PRUNED:
        study.tell(number, state=TrialState.PRUNED)
    else:
        study.tell(number, float(value))
    return _row(root, tracker.trial(number))


def _history(root: Path, job_id: str) -> dict[str, Any]:
    try:
        data = json.loads((job_dir(root, job_id) / HISTORY).read_bytes())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _row(root: Path, t: FrozenTrial) -> TrialRow:
    attrs = t.user_attrs
    job_id = str(attrs.get("job_id", ""))
    history = _history(root, job_id) if job_id else {}
    return TrialRow(number=t.number, state=t.state.name.lower(), params=dict(t.params),
                    value=t.value if t.state == TrialState.COMPLETE else None, job_id=job_id,
                    job_state=attrs.get("job_state"), version=attrs.get("version"),
                    promoted=attrs.get("promoted"), reason=attrs.get("reason"),
                    epochs=history.get("epochs_run"))


CANCELLED = "cancelled.json"


def cancelled(root: Path, name: str) -> str | None:
    """Who cancelled the study and why (``cancel_study``), or None."""
    try:
        return (storage.study_dir(root, name) / CANCELLED).read_text().strip() or "cancelled"
    except OSError:
        return None


def cancel_study(*, root: Path, conn: KafkaConnection, name: str, requested_by: str,
                 reason: str = "", topics: ControlTopics = ControlTopics()) -> list[str]:
    """Stop a study: its runner asks no new trial (and ends once the running ones have), and
    each running trial's job is cancelled (``api.request_cancel``). The jobs asked to stop.
    A study with no trial left running is refused (``PermanentError``)."""
    config = storage.read_config(root, name)
    if config is None:
        raise PermanentError(f"no study {name} (no {storage.STUDIES}/{name}/{storage.CONFIG})")
    running = []
    for t in storage.load_study(root, config).get_trials(deepcopy=False):
        job_id = t.user_attrs.get("job_id")
        st = jobs.read_status(root, job_id) if job_id else None
        if job_id and (st is None or st.state not in FINAL_STATES):
            running.append(str(job_id))
    if cancelled(root, name) is None:
        line = f"cancelled by {requested_by}" + (f": {reason}" if reason else "")
        (storage.study_dir(root, name) / CANCELLED).write_text(line + "\n")
    elif not running:
        raise PermanentError(f"study {name} is already cancelled and has no trial running")
    for job_id in running:
        try:
            api.request_cancel(conn=conn, root=root, job_id=job_id,
                               requested_by=requested_by, reason=reason, topics=topics)
        except PermanentError:
            continue  # ended meanwhile
    return running


def show_study(*, root: Path, name: str) -> StudyResult:
    """The study's trials (parameters, value, state, job, version) and its best trial."""
    config = storage.read_config(root, name)
    if config is None:
        raise PermanentError(f"no study {name} (no {storage.STUDIES}/{name}/{storage.CONFIG})")
    study = storage.load_study(root, config)
    rows = [_row(root, t) for t in study.get_trials(deepcopy=False)]
    done = [r for r in rows if r.state == "complete" and r.value is not None]
    best = None
    if done:
        pick = min if config.direction == "minimize" else max
        best = pick(done, key=lambda r: (r.value, r.number))
    return StudyResult(config, rows, best)


def _promote_best(root: Path, conn: KafkaConnection, topics: ControlTopics,
                  result: StudyResult) -> StudyResult:
    best, name = result.best, result.config.model_name
    assert best is not None
    if best.version is None:
        return result
    try:
        mv = versions.load_version(root, name, best.version)
    except HeadraceError as exc:
        return _note(result, f"best trial {best.number}: its version is unreadable: {exc}")
    gate = mv.manifest.extra.get("gate") or {}
    if not (gate.get("passed") and gate.get("promote", True)):
        reasons = "; ".join(gate.get("reasons") or []) or "promotion off"
        return _note(result, f"best trial {best.number} ({name}:{best.version}) was not "
                             f"promoted by its gate: {reasons}")
    current = versions.read_alias(root, name)
    if current is not None and current.version == best.version:
        return _note(result, f"{name}:{best.version} (best trial {best.number}) is production",
                     promoted=True)
    sink = EventSink(conn)
    try:
        promotion.promote(root=root, sink=sink, topic=topics.models, name=name,
                          version=best.version,
                          reason=f"study {result.config.name}: best trial {best.number}")
    finally:
        sink.close()
    return _note(result, f"{name}:{best.version} (best trial {best.number}) promoted to "
                         "production", promoted=True)


def _note(result: StudyResult, line: str, *, promoted: bool = False) -> StudyResult:
    return StudyResult(result.config, result.trials, result.best, promoted,
                       [*result.notes, line])
