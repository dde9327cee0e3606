"""What the CLI calls: request training, follow a job, inspect jobs and models, promote.

Every function is keyword-only and usable from Python; the job table operators see is the
``status.json`` of each job directory on the DFS (``jobs list/show``), the live view is the
events.jobs topic (``train --wait``, ``jobs logs --follow`` reads the job's log file).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from headrace.contracts import (
    FINAL_STATES,
    CancelRequested,
    Framework,
    JobEvent,
    JobEventKind,
    ModelPublished,
    ModelSpec,
    Task,
    TrainRequested,
    Trigger,
    TriggerKind,
    parse,
)
from headrace.core.errors import (
    ConfigError,
    PermanentError,
    RetriableError,
    ValidationFailed,
)
from headrace.store import outcomes, versions
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import EventSink, send_events
from headrace.streams.reading import iter_records
from headrace.streams.topics import ControlTopics
from headrace.trainers import history, jobs, promotion
from headrace.trainers.admission import admit
from headrace.trainers.control.triggers import Triggers, find_schedule, schedule_request
from headrace.trainers.distributed.plan import plan_of
from headrace.trainers.history import History
from headrace.trainers.hyperparameters import split_params
from headrace.trainers.limits import RequestCaps

TERMINAL = (JobEventKind.SUCCEEDED, JobEventKind.FAILED, JobEventKind.CANCELLED)
# (replication factor, topic config) for topics a request may have to create; None: (1, {}).
Durability = tuple[int, dict[str, str]] | None


def build_request(*, model_name: str, framework: str, dataset_uri: str,
                  task: str = "classifier", label: str = "label", epochs: int | None = None,
                  hidden: tuple[int, ...] | None = None, batch_size: int | None = None,
                  learning_rate: float | None = None, idempotency_key: str | None = None,
                  source: str = "cli", code: str | None = None,
                  entrypoint: str = "model:build", workers: int = 1, servers: int = 0,
                  strategy: str = "auto", model: str = "mlp",
                  init_weights: str | None = None,
                  params: dict[str, object] | None = None) -> TrainRequested:
    """A validated TrainRequested (raises ValidationFailed with one line, also for a
    distributed strategy the framework cannot run). ``code``: a package from ``headrace code
    push`` (NAME@HEX) built by ``entrypoint`` (instead of the family ``model``). ``params``:
    the family's hyperparameters (ModelSpec fields: ``filters``, ``image_size``, ...; an
    unknown one is refused), or for ``code`` any key (its ``hyperparameters``). Options left
    None take the spec's defaults (``epochs`` a maximum, ``batch_size`` from the rows)."""
    options = {"epochs": epochs, "hidden": list(hidden) if hidden else None,
               "batch_size": batch_size, "learning_rate": learning_rate,
               "init_weights": init_weights}
    fields, hyper = split_params(None if code is not None else model, params or {}, options)
    spec: dict[str, Any] = {**fields, "task": task, "label": label, "strategy": strategy,
                            "model": model}
    if code is not None:
        spec["model"] = {"code": code, "entrypoint": entrypoint}
    data = {
        "idempotency_key": idempotency_key or f"manual:{model_name}:{time.time_ns()}",
        "model_name": model_name, "framework": framework, "dataset_uri": dataset_uri,
        "spec": spec, "hyperparameters": hyper,
        "resources": {"workers": workers, "servers": servers},
        "trigger": Trigger(kind=TriggerKind.MANUAL, source=source).model_dump(),
    }
    request = parse(TrainRequested, data)
    plan_of(request)
    return request


def gang_of(request: TrainRequested) -> dict[str, object]:
    """The strategy and gang size a request runs with (what ``jobs show`` prints)."""
    try:
        return plan_of(request).record()
    except ValidationFailed as exc:
        return {"strategy": f"invalid: {exc}", "workers": request.resources.workers,
                "servers": request.resources.servers}


def admit_request(*, request: TrainRequested, root: Path, caps: RequestCaps) -> None:
    """Refuse a request over a cap or naming bad code, before it is published. The code is
    checked only where this machine sees the DFS (the control plane always checks)."""
    admit(request, root=root, caps=caps, check_code=root.is_dir())
def fire_schedule(*, conn: KafkaConnection, triggers: Triggers, name: str,
                  at: datetime | None = None, topics: ControlTopics = ControlTopics(),
                  durability: Durability = None) -> TrainRequested:
    """Publish schedule ``name``'s TrainRequested for the slot current at ``at`` (default now),
    with the deterministic key ``schedule:<name>:<slot>``; return it."""
    req = schedule_request(find_schedule(triggers, name), at or datetime.now(UTC))
    request_training(conn=conn, request=req, topics=topics, durability=durability)
    return req


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (naive means UTC); ``ConfigError`` with one line otherwise."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--at: {text!r} is not an ISO 8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def job_id_of(request: TrainRequested) -> str:
    return jobs.job_id_for(request.idempotency_key)


def request_training(*, conn: KafkaConnection, request: TrainRequested,
                     topics: ControlTopics = ControlTopics(), durability: Durability = None
                     ) -> str:
    """Publish ``request`` on events.train-requests; return the job id it maps to. Missing
    control topics are created with ``durability`` (replication factor, topic config)."""
    if durability is None:  # the connection's own (the cluster's settings)
        ensure_topics(conn, topics.specs())
    else:
        rf, config = durability
        ensure_topics(conn, [dataclasses.replace(s, config={**s.config, **config})
                             for s in topics.specs()], replication_factor=rf)
    send_events(conn, topics.train_requests, [request], key_of=lambda r: r.idempotency_key)
    return jobs.job_id_for(request.idempotency_key)


def request_cancel(*, conn: KafkaConnection, root: Path, job_id: str, requested_by: str,
                   reason: str = "", topics: ControlTopics = ControlTopics()
                   ) -> CancelRequested:
    """Ask the control plane to cancel ``job_id`` (a ``CancelRequested`` on the request topic,
    keyed by the job). Refused here (``PermanentError``, one line) for a job this machine's DFS
    does not hold or that already ended; the control plane checks again and answers on
    events.jobs (CANCELLED, or DUPLICATE with why it refused)."""
    jobs.read_request(root, job_id)  # one line for an unknown job
    st = jobs.read_status(root, job_id)
    if st is not None and st.state in FINAL_STATES:
        said = f" (version {st.version})" if st.version else f" ({st.reason})" if st.reason else ""
        raise PermanentError(f"job {job_id} already {st.state.value}{said}; nothing to cancel")
    event = CancelRequested(job_id=job_id, requested_by=requested_by, reason=reason)
    send_events(conn, topics.train_requests, [event], key_of=lambda e: e.job_id)
    return event


def follow_job(*, conn: KafkaConnection, job_id: str, topics: ControlTopics = ControlTopics(),
               since_ms: int | None = None, timeout_s: float = 3600.0) -> Iterator[JobEvent]:
    """The job's events from events.jobs until it succeeds or fails (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    done = {"v": False}
    for rec in iter_records(conn, topics.jobs, since_ms=since_ms, follow=True,
                            stop=lambda: done["v"] or time.monotonic() > deadline):
        if rec.key is not None and rec.key != job_id.encode():
            continue
        try:
            ev = parse(JobEvent, rec.value or b"")
        except PermanentError:
            continue
        if ev.job_id != job_id:
            continue
        yield ev
        if ev.kind in TERMINAL:
            done["v"] = True
            return
    if not done["v"]:
        raise RetriableError(f"job {job_id} did not finish within {timeout_s:.0f}s")


def wait_for_job(*, conn: KafkaConnection, job_id: str, topics: ControlTopics = ControlTopics(),
                 since_ms: int | None = None, timeout_s: float = 3600.0,
                 on_event: Callable[[JobEvent], None] | None = None) -> JobEvent:
    last: JobEvent | None = None
    for ev in follow_job(conn=conn, job_id=job_id, topics=topics, since_ms=since_ms,
                         timeout_s=timeout_s):
        last = ev
        if on_event is not None:
            on_event(ev)
    assert last is not None
    return last


def list_jobs(*, root: Path) -> list[jobs.JobStatus]:
    return jobs.list_jobs(root)


def show_job(*, root: Path, job_id: str) -> tuple[jobs.JobStatus, TrainRequested]:
    req = jobs.read_request(root, job_id)
    st = jobs.read_status(root, job_id) or jobs.initial_status(job_id, req)
    return st, req


def job_log(*, root: Path, job_id: str, follow: bool = False,
            stop: Callable[[], bool] | None = None) -> Iterator[str]:
    """Lines of the job's log file; with ``follow``, keep reading until the job ends."""
    jobs.read_request(root, job_id)  # one-line error for an unknown job
    path = jobs.log_path(root, job_id)
    pos = 0
    while True:
        if path.exists():
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            yield from chunk.decode("utf-8", "replace").splitlines()
        if not follow:
            return
        st = jobs.read_status(root, job_id)
        if (st is not None and st.state in FINAL_STATES) or (stop and stop()):
            return
        time.sleep(0.5)


@dataclass(frozen=True)
class ModelSummary:
    name: str
    versions: list[int]
    production: int | None
    # version -> its outcome (promoted, kept, refused, rolled back), when known
    outcomes: dict[int, outcomes.Outcome] = dataclasses.field(default_factory=dict)


def list_models(*, root: Path) -> list[ModelSummary]:
    """Every model with its versions, production, and each version's outcome."""
    out = []
    for name in versions.list_models(root):
        ptr = versions.read_alias(root, name)
        vs = versions.list_versions(root, name)
        said = {v: o for v in vs if (o := outcomes.of_version(root, name, v)) is not None}
        out.append(ModelSummary(name, vs, ptr.version if ptr else None, said))
    return out


def training_history(*, root: Path, job_id: str) -> History:
    """The job's per-epoch curve (history.json; empty before its first epoch)."""
    return history.read(root, job_id)


def show_model(*, root: Path, ref: str) -> versions.ModelVersion:
    """``NAME`` (production, else the latest) or ``NAME:VERSION``; hashes verified."""
    if ":" in ref or "@" in ref:
        return versions.resolve(root, ref)
    if versions.read_alias(root, ref) is not None:
        return versions.resolve(root, ref)
    vs = versions.list_versions(root, ref)
    if not vs:
        raise versions.VersionNotFound(f"model {ref} has no versions")
    return versions.load_version(root, ref, vs[-1])


def promote_model(*, root: Path, conn: KafkaConnection, ref: str,
                  topics: ControlTopics = ControlTopics()) -> ModelPublished:
    name, _, ver = ref.partition(":")
    if not ver.isdecimal():
        raise PermanentError(f"promote needs NAME:VERSION, not {ref!r}")
    ensure_topics(conn, topics.specs())
    sink = EventSink(conn)
    try:
        return promotion.promote(root=root, sink=sink, topic=topics.models, name=name,
                                 version=int(ver), reason="manual promotion")
    finally:
        sink.close()


def rollback_model(*, root: Path, conn: KafkaConnection, name: str,
                   topics: ControlTopics = ControlTopics()) -> ModelPublished:
    ensure_topics(conn, topics.specs())
    sink = EventSink(conn)
    try:
        return promotion.rollback(root=root, sink=sink, topic=topics.models, name=name)
    finally:
        sink.close()


def make_demo_dataset(*, root: Path, out: str = "datasets/demo.parquet", rows: int = 2000,
                      task: str = "classifier", seed: int = 0) -> Path:
    from headrace.core.naming import confined
    from headrace.trainers.datasets import make_demo

    path = confined(root, out)
    return make_demo(out=path, rows=rows, task=Task(task), seed=seed)


__all__ = ["Framework", "ModelSpec"]
