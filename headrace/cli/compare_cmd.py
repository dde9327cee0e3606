"""``headrace models compare``: a thin shell over ``headrace.ops.rollout.live_evidence``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from headrace.cli import _context
from headrace.core.errors import ValidationFailed
from headrace.streams.topics import ControlTopics

out = Console(highlight=False, soft_wrap=True)


def _ref(text: str) -> tuple[str, int]:
    name, sep, ver = text.partition(":")
    if not sep or not name or not ver.isdecimal():
        raise ValidationFailed(f"expected NAME:VERSION, not {text!r}")
    return name, int(ver)


def compare(
    ctx: typer.Context,
    a: Annotated[str, typer.Argument(help="NAME:VERSION, the production side.")],
    b: Annotated[str, typer.Argument(help="NAME:VERSION, the candidate.")],
    stream: Annotated[str, typer.Option("--stream", help="The stream they ran on.")],
    png: Annotated[Path | None, typer.Option("--png", help="Also draw it to this PNG.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Two versions on the same live records: agreement, both confusion matrices, live
    accuracy with Wilson intervals and McNemar's exact test once labels arrived (before: the
    CBPE estimate)."""
    from headrace.ops.rollout import compare_png
    from headrace.ops.rollout.live_evidence import compare as live_compare

    (na, va), (nb, vb) = _ref(a), _ref(b)
    if na != nb:
        raise ValidationFailed(f"compare two versions of one model, not {na} and {nb}")
    ev = live_compare(_context.connection(ctx), _context.control_topics(ctx), stream=stream,
                      name=na, a=va, b=vb)
    if png is not None:
        compare_png.render(ev, png)
    if as_json:
        out.print_json(json.dumps(ev.as_dict()))
        return
    for line in compare_png.summary_lines(ev):
        out.print(line)
    panels = [(ev.matrix, f"v{va} \\ v{vb}")]
    if ev.labelled:
        panels += [(ev.production_truth, f"truth \\ v{va}"),
                   (ev.candidate_truth, f"truth \\ v{vb}")]
    for m, corner in panels:
        table = Table(corner, *ev.classes)
        for cls, row in zip(ev.classes, m.tolist(), strict=True):
            table.add_row(cls, *map(str, row))
        out.print(table)
    if png is not None:
        out.print(f"image: {png}")


def promote_on_live_gate(ctx: typer.Context, ref: str, *, stream: str | None,
                         topics: ControlTopics) -> None:
    """``models promote --if-live-gate``: promote, or refuse with one line per reason."""
    from headrace.ops.rollout.live_evidence import promote_if_live_gate

    name, sep, _ = ref.partition(":")
    version: int | None = None
    if sep or stream is None:  # NAME alone with --stream: the stream's rollout candidate
        name, version = _ref(ref)
    d = promote_if_live_gate(root=_context.settings(ctx).dfs_root, conn=_context.connection(ctx),
                             topics=topics, name=name, version=version, stream=stream)
    version = d.version
    head = (f"{name}:{version} is production (was {d.production_version}): live gate held on "
            f"{d.stream}" if d.promoted else
            f"{name}:{version} not promoted: live gate failed on {d.stream} against production "
            f"v{d.production_version}")
    typer.echo(head)
    for line in d.reasons():
        typer.echo(f"  {line}", err=not d.promoted)
    if not d.promoted:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    from headrace.cli.trainers_cmd import models_app

    models_app.command("compare")(compare)
