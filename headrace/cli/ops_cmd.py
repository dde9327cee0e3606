"""`headrace replay | dlq | dashboard | up | demo`: thin shells over headrace.ops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from headrace.cli import _context
from headrace.core.errors import ValidationFailed

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


def replay(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="Topic to replay from.")],
    into: Annotated[str | None, typer.Option(
        "--into", help="Target topic; `--into SOURCE` appends the range onto the source "
        "itself (never implied).")] = None,
    partition: Annotated[list[int] | None, typer.Option(
        "--partition", "-p", help="Partition to replay (repeat; default: all).")] = None,
    from_offset: Annotated[list[int] | None, typer.Option(
        "--from-offset", help="First offset, inclusive (once per --partition).")] = None,
    to_offset: Annotated[list[int] | None, typer.Option(
        "--to-offset", help="End offset, exclusive (once per --partition).")] = None,
    from_time: Annotated[str | None, typer.Option(
        "--from", help="Start time, inclusive, ISO-8601 (2026-11-20T00:00Z).")] = None,
    to_time: Annotated[str | None, typer.Option(
        "--to", help="End time, exclusive, ISO-8601.")] = None,
    rate: Annotated[float | None, typer.Option(
        "--rate", help="At most this many rows a second.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print per partition what would move; write nothing.")] = False,
    resume: Annotated[str | None, typer.Option(
        "--resume", help="Continue the replay with this id from its checkpoint.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="Re-score the range with NAME:VERSION into --into (a side topic).")] = None,
    runtime: Annotated[str | None, typer.Option(
        "--runtime", help="With --model: what runs it: tensorflow (default), jax, torch or "
        "onnxruntime (the version's ONNX export), as a scorer would.")] = None,
    keep_timestamps: Annotated[bool, typer.Option(
        "--keep-timestamps", help="Keep the original record timestamps.")] = False,
    progress: Annotated[bool, typer.Option(
        "--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Copy a range of a topic (by offsets or times) keeping keys, headers and partitions, or
    re-score it with a chosen model version into a side topic. Resumable."""
    from headrace.ops import replaying

    settings = _context.settings(ctx)
    conn = _context.connection(ctx)
    if resume is not None:
        given = [n for n, v in (("--into", into), ("--partition", partition),
                                ("--from-offset", from_offset), ("--to-offset", to_offset),
                                ("--from", from_time), ("--to", to_time), ("--model", model),
                                ("--runtime", runtime))
                 if v]
        if given:
            raise ValidationFailed(f"--resume continues a recorded replay; drop {', '.join(given)}")
        cp = replaying.resume(conn, settings.dfs_root, resume, source=source)
        if cp.status == "completed":
            out.print(f"replay {cp.replay_id} already completed ({cp.records_out} rows)")
            return
    else:
        if runtime is not None and model is None:
            raise ValidationFailed("--runtime is for a re-score: give --model NAME:VERSION")
        if model is not None:
            from headrace.ops.rescoring import check_model
            from headrace.scorers.adapters import select_runtime

            select_runtime(runtime or "tensorflow")  # an unknown one: refused before a plan
            check_model(settings.dfs_root, model)
        cp = replaying.plan(conn, source=source, into=into, partitions=partition or (),
                            from_offsets=from_offset or (), to_offsets=to_offset or (),
                            from_time=from_time, to_time=to_time, rate=rate, model=model,
                            runtime=runtime or "tensorflow", keep_timestamps=keep_timestamps)
        if into is None and not dry_run:  # a copy of a topic onto itself only on purpose
            raise ValidationFailed(
                f"replay needs a target: --into TOPIC (a side topic), or --into {source} to "
                f"append the range onto {source} itself")
    for line in replaying.describe(cp):
        out.print(line)
    if dry_run:
        out.print("dry run: nothing written" + ("" if into or resume else
                  f" (a real run needs --into: a side topic, or {source} itself)"))
        return
    bar = _progress_bar(cp.replay_id) if progress and err.is_terminal else None
    try:
        if bar is None:
            result = replaying.run(conn, settings.dfs_root, cp)
        else:
            with bar:
                task = bar.add_task("replay", total=None)
                result = replaying.run(
                    conn, settings.dfs_root, cp,
                    on_progress=lambda done, total: bar.update(task, completed=done, total=total))
    except KeyboardInterrupt:
        err.print(f"stopped; resume with: headrace replay {cp.source} --resume {cp.replay_id}")
        raise typer.Exit(130) from None
    skipped = (f", {result.skipped_on_resume} already in the target skipped"
               if result.skipped_on_resume else "")
    out.print(f"replay {result.replay_id}: {result.records_in} records in, {result.rows_out} "
              f"rows out to {cp.target} in {result.elapsed_s:.1f}s "
              f"({result.rows_per_s:,.0f} rows/s){skipped}; checkpoint {result.checkpoint}")


def _progress_bar(replay_id: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{replay_id}[/]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.percentage:>3.0f}%"), TimeRemainingColumn(), console=err,
        transient=False)


dlq_app = typer.Typer(help="Dead letters of a stream: list, show, redrive.", no_args_is_help=True)


@dlq_app.command("list")
def dlq_list(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="Stream name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Dead letters grouped by reason, with counts."""
    from headrace.ops import deadletters

    settings = _context.settings(ctx)
    conn = _context.connection(ctx)
    letters = deadletters.read_letters(conn, stream)
    groups = deadletters.summarize(letters, deadletters.load_ledger(settings.dfs_root, stream))
    if as_json:
        out.print_json(json.dumps([g.__dict__ for g in groups]))
        return
    table = Table(title=f"dead letters of {stream}: {len(letters)}, {len(groups)} reasons")
    for col in ("count", "reason", "error class", "stage", "redriven", "first"):
        table.add_column(col, overflow="fold")
    for g in groups:
        table.add_row(str(g.count), g.sample_message, g.error_class, g.stage, str(g.redriven),
                      g.first_ref)
    out.print(table)


@dlq_app.command("show")
def dlq_show(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="Stream name.")],
    offset: Annotated[list[str] | None, typer.Option(
        "--offset", help="Letter offset N (partition 0) or P:N; repeat.")] = None,
    max_letters: Annotated[int, typer.Option("--max", min=1, max=10_000,
                                             help="Show at most this many.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Headers and a payload preview of dead letters."""
    from headrace.ops import deadletters

    conn = _context.connection(ctx)
    letters = deadletters.select(deadletters.read_letters(conn, stream), offsets=offset or (),
                                 limit=max_letters)
    if as_json:
        out.print_json(json.dumps([lt.to_json() for lt in letters]))
        return
    for lt in letters:
        d = lt.to_json()
        out.print(f"[bold]{escape(str(d['ref']))}[/] {escape(str(d['error_class']))} at "
                  f"{escape(str(d['stage']))}: {escape(str(d['error_message']))}")
        out.print(f"  source {d['source_topic']}[{d['source_partition']}]@{d['source_offset']}"
                  f"  key={d['key']!r}  {d['bytes']} bytes", markup=False)
        for k, v in d["headers"].items():
            out.print(f"  {k}: {v}", markup=False)
        out.print(f"  payload: {d['preview']!r}{' ...' if d['truncated'] else ''}", markup=False)
    if not letters:
        out.print(f"no dead letters in {stream}")


@dlq_app.command("redrive")
def dlq_redrive(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="Stream name.")],
    error_class: Annotated[str | None, typer.Option(
        "--error-class", help="Only letters of this error class.")] = None,
    offset: Annotated[list[str] | None, typer.Option(
        "--offset", help="Only this letter: N (partition 0) or P:N; repeat.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print what would move and which letters would fail again.")] = False,
    model: Annotated[str | None, typer.Option(
        "--model", help="Check letters against this model (default: the stream's name).")]
        = None,
) -> None:
    """Re-produce dead letters' original bytes to their source topic, each at most once; say
    which would fail again with the production model."""
    from headrace.ops import deadletters
    from headrace.ops.rechecking import recheck

    settings = _context.settings(ctx)
    conn = _context.connection(ctx)
    result = deadletters.redrive(conn, settings.dfs_root, stream, error_class=error_class,
                                 offsets=offset or (), dry_run=dry_run)
    checks = recheck(settings.dfs_root, model or stream,
                     [lt for it in result.items for lt in it.letters])
    for line in result.lines(checks):
        out.print(line, markup=False)


def dashboard(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks one.")] = 8780,
    scorer: Annotated[list[str] | None, typer.Option(
        "--scorer", help="A scorer's metrics URL (http://host:port/metrics); repeat.")] = None,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", envvar="HEADRACE_DASHBOARD_TOKEN_FILE",
        help="A file holding a bearer token every API request must carry (open the page "
             "as URL#token=TOKEN).")] = None,
    control_url: Annotated[str | None, typer.Option(
        "--control-url", envvar="HEADRACE_DASHBOARD_CONTROL_URL",
        help="The control plane's probes (http://host:port): its /livez and /readyz are "
             "shown in the health panel.")] = None,
) -> None:
    """Serve the dashboard: jobs, models, scorers, dead letters, health."""
    from headrace.ops.dashboard import serve_forever
    from headrace.ops.dashboard.server import exposure_warning, read_token

    token = read_token(token_file) if token_file is not None else None
    warning = exposure_warning(host, token)
    if warning:
        typer.echo(warning, err=True)

    where = _context.service(ctx, "dashboard", own_broker=True, no_broker=(
        "no --bootstrap or HEADRACE_BOOTSTRAP given: jobs and models from the DFS only"))
    for line in where.lines():
        out.print(line)
    settings = where.settings
    conn = _context.connection(ctx) if settings.bootstrap else None
    serve_forever(settings=settings, conn=conn, host=host, port=port, token=token,
                  control_url=control_url,
                  scorer_urls=list(scorer or ()), announce=lambda url: out.print(
                      f"dashboard on [bold]{url}[/] (Ctrl-C stops)"))


def up(
    ctx: typer.Context,
    dashboard_port: Annotated[int, typer.Option(
        "--dashboard-port", min=0, max=65535, help="Dashboard port; 0 picks one.")] = 8780,
) -> None:
    """Run the whole local stack: broker, control plane + local executor, a scorer per stream,
    the dashboard. A status line per component; Ctrl-C stops everything."""
    from headrace.ops.stack import run_up

    where = _context.service(ctx, "up", own_broker=True)
    for line in where.lines():
        out.print(line)
    raise typer.Exit(run_up(settings=where.settings, dashboard_port=dashboard_port, say=out.print))


def demo(
    ctx: typer.Context,
    records: Annotated[int, typer.Option(min=10, max=1_000_000,
                                         help="Records to stream.")] = 2000,
    epochs: Annotated[int, typer.Option(min=1, max=100, help="Training epochs.")] = 3,
) -> None:
    """The guided tour: train TF, score a stream live, train MXNet, watch the swap, then
    train and score a digits image model; exit 0."""
    from headrace.ops.demo import run_demo

    where = _context.service(ctx, "demo", own_broker=True, scratch_dfs=True)
    for line in where.lines():
        out.print(line)
    raise typer.Exit(run_demo(settings=where.settings, records=records, epochs=epochs,
                              say=out.print, keep_dfs=where.dfs_named))


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
    app.add_typer(dlq_app, name="dlq")
    app.command("dashboard")(dashboard)
    app.command("up")(up)
    app.command("demo")(demo)
