"""``headrace topology plan|explain|apply``: a thin shell over ``headrace.topology.commands``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from headrace.topology.placement import Plan

app = typer.Typer(
    name="topology",
    help="Plan scorer placement (racks, GPUs, volumes); write Helm values or apply the chart.",
    no_args_is_help=True,
)

ClusterOpt = Annotated[Path, typer.Option("--cluster", "-c", help="Cluster description (YAML).")]
PreviousOpt = Annotated[Path | None, typer.Option(
    "--previous", help="The last plan (JSON); its ownership is kept where still valid.")]
ChartOpt = Annotated[Path | None, typer.Option(
    "--chart", envvar="HEADRACE_CHART",
    help="A Helm chart directory (default: the chart shipped in the package).")]


@app.command("plan")
def plan_cmd(
    cluster: ClusterOpt,
    values_out: Annotated[Path | None, typer.Option(
        "--values-out", help="Write Helm values (scorerGroups) for helm/headrace.")] = None,
    manifests: Annotated[Path | None, typer.Option(
        "--manifests", help="Write the objects `apply` would create (the chart rendered with "
        "the plan's values), validated, as YAML files into this directory.")] = None,
    previous: PreviousOpt = None,
    plan_out: Annotated[Path | None, typer.Option(
        "--plan-out", help="Write the plan as JSON (feed it to --previous next time).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    chart: ChartOpt = None,
) -> None:
    """Plan scorer groups for a cluster and print them as a table."""
    # headrace.topology is imported by the command, not with the CLI: it needs the
    # kubernetes client (the `topology` extra), which other roles do not install.
    from headrace.cli.topology_views import plan_table
    from headrace.topology import commands

    result = commands.run_plan(cluster_path=cluster, previous_path=previous,
                              values_out=values_out, manifests_dir=manifests, plan_out=plan_out,
                              chart=chart)
    stats = result.plan.stats
    if as_json:
        typer.echo(commands.plan_json(result))
        _fail_if_nothing_placed(result.plan)
        return
    console = Console()
    console.print(plan_table(result.plan))
    if result.moved is not None:
        console.print(f"{result.moved} partition(s) changed owner since the previous plan")
    for path in result.written:
        console.print(f"wrote {path}")
    if 0 < stats.placed < stats.partitions:
        console.print(f"{stats.partitions - stats.placed} of {stats.partitions} partitions not "
                      "placed; `headrace topology explain` says why")
    _fail_if_nothing_placed(result.plan)


def _fail_if_nothing_placed(plan: Plan) -> None:
    """A plan that places no partition is an error: say why, exit non-zero."""
    stats = plan.stats
    if stats.partitions == 0 or stats.placed > 0:
        return
    why = [f"[{e.reason}] {e.message}" for e in plan.explanations] or [
        "no explanation recorded"]
    typer.echo(f"headrace: error: the plan places 0 of {stats.partitions} partitions:",
               err=True)
    for line in why[:10]:
        typer.echo(f"  {line}", err=True)
    raise typer.Exit(1)


@app.command("explain")
def explain_cmd(
    cluster: ClusterOpt,
    previous: PreviousOpt = None,
    live: Annotated[bool, typer.Option(
        "--live", help="Also list Headrace's pods the scheduler left Pending, with its "
        "reason (reads the cluster).")] = False,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    context: Annotated[str | None, typer.Option(
        "--context", help="The kubeconfig context (default: its current one).")] = None,
) -> None:
    """Say why each decision that is not rack-local was made (and, with --live, why pods the
    plan placed are not scheduled)."""
    from headrace.cli.topology_views import explain_lines
    from headrace.topology import commands

    plan = commands.run_explain(cluster_path=cluster, previous_path=previous)
    for line in explain_lines(plan):
        typer.echo(line)
    if live:
        lines = commands.run_explain_live(cluster_path=cluster, namespace=namespace,
                                          context=context)
        for line in lines or ["every Headrace pod is scheduled"]:
            typer.echo(line)


@app.command("apply")
def apply_cmd(
    cluster: ClusterOpt,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="List the creates, patches and deletes an apply would make (reads "
        "the cluster, changes nothing).")] = False,
    render: Annotated[bool, typer.Option(
        "--render", help="Print the objects as YAML instead (no cluster needed).")] = False,
    context: Annotated[str | None, typer.Option(
        "--context", help="The kubeconfig context (default: its current one).")] = None,
    previous: PreviousOpt = None,
    chart: ChartOpt = None,
    server_side: Annotated[bool, typer.Option(
        "--server-side/--client-side", help="Server-side apply as field manager 'headrace' "
        "(default), or create and strategic-merge patch.")] = True,
    force_conflicts: Annotated[bool, typer.Option(
        "--force-conflicts", help="Take over fields another field manager set (server-side "
        "apply refuses such conflicts otherwise).")] = False,
) -> None:
    """Render the chart with the plan's values and apply the scorer objects and the executor's
    RBAC as one ApplySet: apply each, delete what an earlier apply made and this one no longer
    wants."""
    from headrace.topology import commands

    _, lines = commands.run_apply(cluster_path=cluster, namespace=namespace, dry_run=dry_run,
                                 render=render, context=context, previous_path=previous,
                                 chart=chart, server_side=server_side,
                                 force_conflicts=force_conflicts)
    for line in lines:
        typer.echo(line.rstrip("\n"))


def register(root: typer.Typer) -> None:
    root.add_typer(app)
