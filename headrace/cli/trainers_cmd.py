"""``headrace train | jobs | datasets | control | job | schedule``: thin shells over
``headrace.trainers.api``, ``headrace.trainers.control.service`` and
``headrace.trainers.job_process``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from headrace.cli import _context
from headrace.cli._context import PrefixOpt
from headrace.contracts import JobEvent, JobEventKind, TrainRequested
from headrace.core.errors import ConfigError, PermanentError
from headrace.store import outcomes
from headrace.streams.topics import ControlTopics
from headrace.trainers import api
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.jobs import JobStatus
from headrace.trainers.limits import RequestCaps

console = Console()
jobs_app = typer.Typer(help="Inspect training jobs (their status.json on the DFS).",
                       no_args_is_help=True)
datasets_app = typer.Typer(help="Datasets on the DFS.", no_args_is_help=True)
job_app = typer.Typer(help="Run one job in this process (what executors start).",
                      no_args_is_help=True)



_topics = _context.control_topics


def _hidden(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise typer.BadParameter("use comma-separated integers, e.g. 64,64",
                                 param_hint="--hidden") from None
    if not sizes:
        raise typer.BadParameter("at least one layer", param_hint="--hidden")
    return sizes


def train(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Model name.")],
    framework: Annotated[str, typer.Option("--framework", "-f",
                                           help="tensorflow, mxnet or torch (pytorch).")],
    dataset: Annotated[str, typer.Option("--dataset", "-d",
                                         help="Parquet URI relative to the DFS root.")],
    task: Annotated[str, typer.Option(help="classifier or regressor.")] = "classifier",
    label: Annotated[str, typer.Option(help="Label column.")] = "label",
    epochs: Annotated[int | None, typer.Option(
        min=1, help="The most epochs (default 100): training stops earlier when validation "
                    "loss stops improving.")] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", min=1, help="Rows per step (default: chosen from the dataset size).")]
        = None,
    learning_rate: Annotated[float | None, typer.Option(
        "--learning-rate", min=0.0, help="Starting learning rate (default 0.001).")] = None,
    hidden: Annotated[str | None, typer.Option(help="Hidden layer sizes (default 64,64).")]
        = None,
    code: Annotated[str | None, typer.Option(
        help="Your model code, NAME@HEX from `headrace code push`.")] = None,
    entrypoint: Annotated[str, typer.Option(
        help="With --code: the builder, package.module:function.")] = "model:build",
    model: Annotated[str, typer.Option(
        "--model", "-m", help="Model family: mlp, cnn, text, mobilenet_v2, resnet50, ...")]
        = "mlp",
    init_weights: Annotated[str | None, typer.Option(
        help="Initial weights on the DFS (models/... or datasets/...).")] = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="A hyperparameter KEY=VALUE (repeatable): the family's (e.g. "
                              "filters=32,64 image_size=32,32 embedding_dim=64), or any key "
                              "for --code (its build receives them).")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait",
                                       help="Follow the job until it ends.")] = True,
    idempotency_key: Annotated[str | None, typer.Option(
        help="Same key, same job (default: a new key).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait with --wait.")] = 3600.0,
    workers: Annotated[int, typer.Option(min=1, help="Training processes (a gang).")] = 1,
    servers: Annotated[int, typer.Option(
        min=0, help="Parameter servers (strategy parameter_server).")] = 0,
    strategy: Annotated[str, typer.Option(
        help="auto (all-reduce for TensorFlow, parameter servers for MXNet), allreduce or "
             "parameter_server.")] = "auto",
    topic_prefix: PrefixOpt = "",
) -> None:
    """Publish a TrainRequested; with --wait, show progress until the job ends (exit 1 on
    failure, with the reason)."""
    request = api.build_request(model_name=name, framework=framework, dataset_uri=dataset,
                                task=task, label=label, epochs=epochs, hidden=_hidden(hidden),
                                batch_size=batch_size, learning_rate=learning_rate,
                                idempotency_key=idempotency_key, code=code,
                                entrypoint=entrypoint, workers=workers, servers=servers,
                                strategy=strategy, model=model,
                                init_weights=init_weights, params=_context.key_values(param or []))
    s = _context.settings(ctx)
    # Refused here with one line (the control plane checks again): caps, and the code where
    # this machine sees the DFS.
    api.admit_request(request=request, root=s.dfs_root, caps=RequestCaps.from_settings(s))
    conn = _context.connection(ctx)
    topics = _topics(ctx, topic_prefix)
    since = int(time.time() * 1000) - 5000
    s = _context.settings(ctx)
    job_id = api.request_training(conn=conn, request=request, topics=topics,
                                  durability=(s.replication_factor, s.topic_config()))
    console.print(f"requested {name} ({framework}) as job [bold]{job_id}[/bold]")
    if not wait:
        return
    final = _follow(conn=conn, job_id=job_id, topics=topics, since_ms=since,
                    epochs=request.spec.epochs,
                    timeout_s=timeout)
    if final.kind in (JobEventKind.FAILED, JobEventKind.CANCELLED):
        console.print(f"[red]job {job_id} {final.kind.value}:[/red] {escape(final.reason or '')}")
        raise typer.Exit(1)
    said = _final_line(s.dfs_root, job_id, final)
    console.print(f"[green]job {job_id} succeeded:[/green] {escape(said)}")


def _final_line(root: Path, job_id: str, final: JobEvent) -> str:
    """The finished job's outcome as every view says it: from the DFS where this machine sees
    it (a later promotion shows), else the event's own line (written by the same code)."""
    st = outcomes.read_job_status(root, job_id)
    found = outcomes.of_job(root, st) if st is not None else None
    version = st.get("version") if st is not None else None
    if found is None or not isinstance(version, int):
        return final.message or ""
    return f"{st.get('model_name')}:{version} {found.line()}"  # type: ignore[union-attr]


def _follow(*, conn: object, job_id: str, topics: ControlTopics, since_ms: int, epochs: int,
            timeout_s: float) -> JobEvent:
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        bar = progress.add_task(f"{job_id} queued", total=epochs, info="")

        def show(ev: JobEvent) -> None:
            if ev.kind == JobEventKind.PROGRESS and ev.epoch is not None:
                info = " ".join(f"{k}={v:.3f}" for k, v in sorted(ev.metrics.items()))
                progress.update(bar, completed=ev.epoch, info=info,
                                description=f"{job_id} epoch {ev.epoch}/{epochs}")
            elif ev.kind in (JobEventKind.STARTED, JobEventKind.RETRYING,
                             JobEventKind.DUPLICATE):
                progress.update(bar, description=f"{job_id} {ev.kind.value}",
                                info=ev.reason or ev.message)
            elif ev.kind == JobEventKind.SUCCEEDED:
                progress.update(bar, completed=epochs, description=f"{job_id} done")

        return api.wait_for_job(conn=conn, job_id=job_id, topics=topics,  # type: ignore[arg-type]
                                since_ms=since_ms, timeout_s=timeout_s, on_event=show)


@jobs_app.command("list")
def jobs_list(ctx: typer.Context) -> None:
    """Every job on the DFS, newest first."""
    # Fits 80 columns: ids and times never wrap or shrink; the reason folds onto more lines.
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    table.add_column("job", no_wrap=True, min_width=14)
    table.add_column("model", overflow="fold")
    table.add_column("fw", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("try", justify="right", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=1)
    root = _context.base_settings(ctx).dfs_root
    for st in api.list_jobs(root=root):
        table.add_row(st.job_id, st.model_name, _FW.get(st.framework, st.framework),
                      st.state.value, str(st.attempts), st.created_at[5:16].replace("T", " "),
                      escape(_reason(root, st)))
    console.print(table)


def _reason(root: Path, st: JobStatus) -> str:
    """Why a job failed; for a finished one, its version's outcome (the words of every view)."""
    found = outcomes.of_job(root, st.model_dump(mode="json"))
    text = found.line() if found is not None else st.reason or ""
    return text.splitlines()[0][:160] if text else ""


def _outcome_line(root: Path, st: JobStatus) -> str:
    found = outcomes.of_job(root, st.model_dump(mode="json"))
    return found.line() if found is not None else ""


_FW = {"tensorflow": "tf", "mxnet": "mx", "torch": "pt"}


@jobs_app.command("show")
def jobs_show(ctx: typer.Context, job_id: str) -> None:
    """A job's state, timestamps, reason, progress and result."""
    root = _context.base_settings(ctx).dfs_root
    st, req = api.show_job(root=root, job_id=job_id)
    table = Table(show_header=False)
    rows = [("job", st.job_id), ("model", st.model_name), ("framework", st.framework),
            ("state", st.state.value), ("reason", st.reason or ""),
            ("attempts", str(st.attempts)), ("trigger", st.trigger or ""),
            ("idempotency key", req.idempotency_key), ("dataset", req.dataset_uri),
            ("created", st.created_at), ("started", st.started_at or ""),
            ("finished", st.finished_at or ""), ("epoch/step", f"{st.epoch} / {st.step}"),
            ("version", str(st.version or "")),
            ("distributed", _gang_line(api.gang_of(req))),
            ("outcome", _outcome_line(root, st)),
            ("gate", "; ".join(st.gate_reasons) or ("passed" if st.version else "")),
            ("spec", _spec_line(req)),
            ("hyperparameters", " ".join(f"{k}={v}" for k, v in req.hyperparameters.items()))]
    hist = api.training_history(root=root, job_id=job_id)
    if hist.epochs:
        rows.append(("training", f"{len(hist.epochs)} epochs, best {hist.best_epoch}, stopped: "
                                 f"{hist.stopped_because or 'running'}, batch size "
                                 f"{hist.batch_size or '?'}"))
        rows.append(("curve", hist.curve()))
    for k, v in rows:
        table.add_row(k, Text(v))  # user text verbatim (no markup)
    console.print(table)
    if st.state.value == "failed":
        raise typer.Exit(1)


def _spec_line(req: TrainRequested) -> str:
    """The spec the job runs with, as given (``batch_size=auto``: chosen from the rows)."""
    data = req.spec.model_dump(mode="json", exclude_none=False)
    data["batch_size"] = data["batch_size"] or "auto"
    keys = ("model", "epochs", "batch_size", "learning_rate", "lr_schedule", "patience",
            "hidden", "filters", "embedding_dim", "max_tokens", "max_length", "image_size",
            "dropout", "validation_split", "seed")

    def text(v: object) -> str:
        return ",".join(map(str, v)) if isinstance(v, list) else str(v)
    return " ".join(f"{k}={text(data[k])}" for k in keys if data.get(k) is not None)


def _gang_line(g: dict[str, object]) -> str:
    if g["strategy"] == "none":
        return "no (one process)"
    return f"{g['strategy']}: {g['workers']} workers" + (
        f", {g['servers']} parameter servers" if g["servers"] else "")


@jobs_app.command("cancel")
def jobs_cancel(
    ctx: typer.Context, job_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the job).")] = "",
    by: Annotated[str | None, typer.Option(
        "--by", help="Who asks (default: this user).")] = None,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Stop a job: the control plane stops its attempt (a queued job never starts) and the job
    ends CANCELLED with who asked and why; nothing is published. A job that already ended, or
    is publishing its model, is refused."""
    who = by or _context.user_name()
    api.request_cancel(conn=_context.connection(ctx), root=_context.base_settings(ctx).dfs_root,
                       job_id=job_id, requested_by=who, reason=reason,
                       topics=_topics(ctx, topic_prefix))
    console.print(f"cancel of job [bold]{job_id}[/bold] requested by {escape(who)}")


@jobs_app.command("logs")
def jobs_logs(ctx: typer.Context, job_id: str,
              follow: Annotated[bool, typer.Option("--follow", "-f")] = False) -> None:
    """The job's log file (every attempt); --follow until it ends."""
    root = _context.base_settings(ctx).dfs_root
    for line in api.job_log(root=root, job_id=job_id, follow=follow):
        typer.echo(line)


@datasets_app.command("make-demo")
def datasets_make_demo(
    ctx: typer.Context,
    rows: Annotated[int, typer.Option(min=10)] = 2000,
    out: Annotated[str, typer.Option(help="Path relative to the DFS root.")] =
        "datasets/demo.parquet",
    task: Annotated[str, typer.Option(help="classifier or regressor.")] = "classifier",
    seed: int = 0,
) -> None:
    """32 float features f0..f31 and a label (3 classes, or a float for regressor)."""
    path = api.make_demo_dataset(root=_context.base_settings(ctx).dfs_root, out=out, rows=rows,
                                 task=task, seed=seed)
    console.print(f"wrote {rows} rows to {path} (dataset URI: {out})")


def control(
    ctx: typer.Context,
    triggers: Annotated[Path | None, typer.Option(
        help="Schedules, event rules and drift rules (YAML; env HEADRACE_TRIGGERS).")] = None,
    concurrency: Annotated[str, typer.Option(help="Jobs at once per framework (local).")]
        = "tensorflow=1,mxnet=1",
    job_timeout: Annotated[float, typer.Option(help="Seconds before a job is killed.")]
        = 3600.0,
    max_attempts: Annotated[int, typer.Option(min=1)] = 3,
    rebuild_table: Annotated[bool, typer.Option(
        "--rebuild-table", help="Delete the tables' changelogs and re-derive the job table "
        "from the DFS (after the broker lost its data; env HEADRACE_CONTROL_REBUILD_TABLE).")]
        = False,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Run the control plane until SIGTERM / Ctrl-C. Jobs run as local subprocesses, or as
    Kubernetes Jobs with HEADRACE_EXECUTOR=kubernetes (then never in this process)."""
    from headrace.trainers.control.service import prepare_executor, run_control
    from headrace.trainers.control.settings import load_control_settings
    from headrace.trainers.control.triggers import load_triggers

    limits: dict[str, int] = {}
    for part in concurrency.split(","):
        fw, _, n = part.partition("=")
        if not n.isdecimal():
            raise ConfigError(f"--concurrency: {part!r} is not FRAMEWORK=N")
        limits[fw.strip()] = int(n)
    where = _context.service(ctx, "control", own_broker=False)
    s = where.settings
    control_settings = load_control_settings(
        triggers=triggers, **({"control_rebuild_table": True} if rebuild_table else {}))
    if control_settings.executor == "kubernetes" and not s.bootstrap:
        raise ConfigError("HEADRACE_BOOTSTRAP is not set: training pods cannot reach an "
                          "embedded broker (required with HEADRACE_EXECUTOR=kubernetes)")
    choice = prepare_executor(control_settings)  # no Kubernetes configuration: exit here
    for line in where.lines():
        console.print(line, highlight=False, soft_wrap=True)
    trig = load_triggers(control_settings.triggers)
    topics = _topics(ctx, topic_prefix)
    root = s.dfs_root
    runs = (f"jobs run here as subprocesses ({concurrency})"
            if control_settings.executor == "local" else
            f"jobs run as Kubernetes Jobs in namespace {control_settings.k8s_namespace} "
            f"(image {control_settings.k8s_image})")
    with _context.service_connection(where) as conn:
        console.print(
            f"control plane: listening to {topics.train_requests} on {conn.bootstrap}; {runs}, "
            f"their files under {root / 'jobs'}, models under {root / 'models'}; events on "
            f"{topics.jobs}. Ctrl-C stops.", highlight=False, soft_wrap=True)
        run_control(root=root, conn=conn, topics=topics, triggers=trig,
                    concurrency=limits, timeout_s=job_timeout, max_attempts=max_attempts,
                    caps=RequestCaps.from_settings(s), choice=choice,
                    kafka_password_file=s.kafka_password_file,
                    replication_factor=s.replication_factor, topic_config=s.topic_config())


schedule_app = typer.Typer(help="Cron schedules from the triggers file.", no_args_is_help=True)


@schedule_app.command("fire")
def schedule_fire(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Schedule name in the triggers file.")],
    triggers: Annotated[Path | None, typer.Option(
        help="Schedules, event rules and drift rules (YAML; env HEADRACE_TRIGGERS).")] = None,
    at: Annotated[str | None, typer.Option(
        help="Fire the slot at this ISO time (default: now).")] = None,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Publish the schedule's TrainRequested for its current slot (what its CronJob runs).
    The idempotency key is schedule:NAME:SLOT, the one the control plane's own scheduler uses,
    so firing twice, or both firing, runs one job."""
    from headrace.trainers.control.settings import load_control_settings
    from headrace.trainers.control.triggers import load_triggers

    path = load_control_settings(triggers=triggers).triggers
    if path is None:
        raise ConfigError("no triggers file: set HEADRACE_TRIGGERS or --triggers")
    when = api.parse_time(at) if at else None
    s = _context.settings(ctx)
    req = api.fire_schedule(conn=_context.connection(ctx), triggers=load_triggers(path),
                            name=name, at=when, topics=_topics(ctx, topic_prefix),
                            durability=(s.replication_factor, s.topic_config()))
    console.print(f"schedule {name} fired for slot {req.trigger.slot} as job "
                  f"[bold]{api.job_id_of(req)}[/bold] (key {req.idempotency_key})")


@job_app.command("run")
def job_run(ctx: typer.Context, job_id: str, topic_prefix: PrefixOpt = "") -> None:
    """Run one job from jobs/JOB_ID/request.json (resumes from its checkpoints)."""
    from headrace.streams.connection import connection_for
    from headrace.trainers import stop_rules
    from headrace.trainers.job_process import run_job
    from headrace.trainers.run_log import load_run_log_settings

    try:
        s = _context.settings(ctx)
        run_log = load_run_log_settings()
    except ConfigError as exc:  # permanent: a retry would read the same settings
        typer.echo(f"headrace job: {exc}", err=True)
        raise typer.Exit(int(ExitCode.PERMANENT)) from None
    code = run_job(root=s.dfs_root, job_id=job_id,
                   conn=connection_for(s) if s.bootstrap else None,
                   topics=_topics(ctx, topic_prefix),
                   caps=RequestCaps.from_settings(s), stop_rules=stop_rules.FACTORIES,
                   run_log=run_log)
    if code:
        raise typer.Exit(int(code))


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("control")(control)
    app.add_typer(jobs_app, name="jobs")
    from headrace.cli import datasets_cmd

    datasets_cmd.register(datasets_app)
    app.add_typer(datasets_app, name="datasets")
    app.add_typer(job_app, name="job")
    app.add_typer(schedule_app, name="schedule")


__all__ = ["PermanentError", "register"]
