"""``headrace tune NAME ...`` and ``headrace tune show NAME``: thin shells over
``headrace.trainers.tuning`` (imported when a command runs: Optuna is not needed for --help)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer._click.core import Context as ClickContext

from headrace.cli import _context
from headrace.cli._help import HelpGroup
from headrace.core.errors import ConfigError, PermanentError

if TYPE_CHECKING:
    from headrace.trainers.tuning import StudyResult, TrialRow

console = Console()


class _RunByDefault(HelpGroup):
    """``headrace tune NAME ...`` is ``headrace tune run NAME ...``; ``show`` is a command."""

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


tune_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True,
                       help="Hyperparameter search: a study whose trials are training jobs.")


@tune_app.command("run")
def tune_run(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Study name (also the model name by default).")],
    framework: Annotated[str, typer.Option("--framework", "-f",
                                           help="tensorflow, mxnet or torch.")],
    dataset: Annotated[str, typer.Option("--dataset", "-d",
                                         help="Dataset URI relative to the DFS root.")],
    space: Annotated[str, typer.Option(
        help="What to search, e.g. 'learning_rate=log:1e-4:1e-2 batch_size=32,64,128 "
             "filters=16,32|32,64' (docs/training.md).")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model family.")] = "mlp",
    trials: Annotated[int, typer.Option(min=1, help="Trials in the study in all.")] = 16,
    parallel: Annotated[int, typer.Option(min=1, help="Trials running at once.")] = 1,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="A fixed hyperparameter KEY=VALUE (repeatable).")] = None,
    epochs: Annotated[int | None, typer.Option(
        min=1, help="Epochs per trial (default: the training default).")] = None,
    task: Annotated[str, typer.Option(help="classifier or regressor.")] = "classifier",
    label: Annotated[str, typer.Option(help="Label column.")] = "label",
    model_name: Annotated[str | None, typer.Option(
        help="The model the trials publish versions of (default: the study name).")] = None,
    metric: Annotated[str, typer.Option(
        help="The validation metric the study optimises (loss, accuracy, macro_f1, rmse, "
             "...); lower is better for loss, rmse and mae.")] = "loss",
    pruner: Annotated[str, typer.Option(help="median, hyperband or none.")] = "median",
    seed: Annotated[int, typer.Option(help="Seed of the sampler and of every trial.")] = 0,
    promote_best: Annotated[bool, typer.Option(
        "--promote-best/--no-promote-best",
        help="At the end, make the best trial's version production if its gate passed.")]
        = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the study.")] = 86400.0,
    topic_prefix: Annotated[str, typer.Option("--topic-prefix", hidden=True)] = "",  # tests
) -> None:
    """Run (or resume) a study: every trial is a training job through the control plane.
    Running the same command again resumes it; no trial runs twice."""
    from pydantic import ValidationError

    from headrace.contracts import ModelSpec
    from headrace.trainers.limits import RequestCaps

    tuning = _tuning()
    if name in tune_app_commands():
        raise PermanentError(f"{name!r} is a tune command, not a study name")
    s = _context.settings(ctx)
    try:
        config = tuning.StudyConfig(
            name=name, model_name=model_name or name, framework=framework,
            dataset_uri=dataset, model=model, task=task, label=label,
            epochs=epochs or ModelSpec.model_fields["epochs"].default, space=space,
            params=_context.key_values(param or [], lists=True), metric=metric, pruner=pruner,
            seed=seed)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "-".join(str(p) for p in err["loc"]).replace("_", "-")
        msg = err["msg"].removeprefix("Value error, ")
        raise PermanentError(f"--{where}: {msg}" if where else msg) from None
    caps = RequestCaps.from_settings(s)
    tuning.check_study(root=s.dfs_root, config=config, caps=caps)  # one line before connecting
    result = tuning.run_study(
        root=s.dfs_root, conn=_context.connection(ctx), config=config, trials=trials,
        parallel=parallel, topics=_context.control_topics(ctx, topic_prefix), caps=caps,
        durability=(s.replication_factor, s.topic_config()), timeout_s=timeout,
        promote_best=promote_best, on_trial=_progress)
    _print(result)


def _tuning() -> ModuleType:
    try:
        import headrace.trainers.tuning as tuning
        from headrace.trainers.tuning import study  # noqa: F401 - Optuna, or the line below
    except ModuleNotFoundError as exc:
        if exc.name != "optuna":
            raise
        raise ConfigError("headrace tune needs Optuna (pip install 'headrace[trainer]')") from None
    return tuning


def tune_app_commands() -> set[str]:
    return {c.name or "" for c in tune_app.registered_commands}


def _progress(row: TrialRow) -> None:
    if row.state == "running":
        console.print(f"trial {row.number} started as job {row.job_id}: {_params_text(row)}")
    else:
        console.print(f"trial {row.number} {row.state}: {_value(row)}"
                      + (f" ({row.reason})" if row.reason else ""))


@tune_app.command("cancel")
def tune_cancel(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Study name.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with each job).")] = "",
    by: Annotated[str | None, typer.Option(
        "--by", help="Who asks (default: this user).")] = None,
    topic_prefix: Annotated[str, typer.Option("--topic-prefix", hidden=True)] = "",  # tests
) -> None:
    """Stop a study: no new trial starts, and each running trial's job is cancelled."""
    who = by or _context.user_name()
    s = _context.base_settings(ctx)
    stopped = _tuning().cancel_study(root=s.dfs_root, conn=_context.connection(ctx), name=name,
                                     requested_by=who, reason=reason,
                                     topics=_context.control_topics(ctx, topic_prefix))
    console.print(f"study {name} cancelled by {who}; cancel requested for "
                  f"{len(stopped)} running trial job(s): {', '.join(stopped) or 'none'}")


@tune_app.command("show")
def tune_show(ctx: typer.Context,
              name: Annotated[str, typer.Argument(help="Study name.")]) -> None:
    """A study's trials: parameters, value, state, job, version."""
    _print(_tuning().show_study(root=_context.base_settings(ctx).dfs_root, name=name))


def _print(result: StudyResult) -> None:
    c = result.config
    console.print(f"study {c.name}: {c.framework.value} {c.model} on {c.dataset_uri}, "
                  f"{c.direction} {c.metric}, pruner {c.pruner}; space {c.space}",
                  soft_wrap=True)  # one line each: a terminal wraps it, scripts can grep it
    table = Table(box=None, pad_edge=False, header_style="bold underline")
    for col in ("#", "state", c.metric, "params", "job", "version"):
        table.add_column(col, overflow="fold", no_wrap=col in ("#", "job"))
    for r in result.trials:
        mark = "*" if result.best is not None and r.number == result.best.number else ""
        version = "" if r.version is None else (
            f"{r.version}" + (" promoted" if r.promoted else ""))
        table.add_row(f"{r.number}{mark}", r.state, _value(r), _params_text(r), r.job_id,
                      version)
    console.print(table)
    if result.best is not None:
        b = result.best
        console.print(f"best: trial {b.number}, {c.metric}={_value(b)}, {_params_text(b)}",
                      soft_wrap=True)
    for line in result.notes:
        console.print(line, soft_wrap=True)


def _value(row: TrialRow) -> str:
    return "" if row.value is None else f"{row.value:.4g}"


def _params_text(row: TrialRow) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in sorted(row.params.items()))


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def register(app: typer.Typer) -> None:
    app.add_typer(tune_app, name="tune", cls=_RunByDefault)
