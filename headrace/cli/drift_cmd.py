"""`headrace drift STREAM [--model NAME] [--png FILE]`: a shell over ops.drift_report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from headrace.cli import _context


def drift(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="The stream whose scorers track drift.")],
    model: Annotated[str | None, typer.Option(
        "--model", help="Model name (default: the stream's name).")] = None,
    png: Annotated[Path | None, typer.Option(
        "--png", help="Also draw reference vs live histograms per feature into FILE.")] = None,
) -> None:
    """The current drift of each profiled feature: state, statistic, value, threshold."""
    from headrace.ops import drift_report

    settings = _context.settings(ctx)
    rep = drift_report.report(_context.connection(ctx), settings, stream, model=model)
    typer.echo(f"{rep.stream}: {rep.model_name}:{rep.model_version}"
               + ("" if rep.profile else "  (this version has no drift profile)")
               + (f", windows of {rep.profile.calibration.window} records at a "
                  f"{rep.profile.calibration.false_alarm_rate:g} false-alarm rate"
                  if rep.profile else ""))
    typer.echo(f"{'feature':<24} {'state':<9} {'test':<11} {'value':>9} {'threshold':>9} "
               f"{'in a row':>8} {'window':>6}")
    for r in rep.rows:
        state = "DRIFTING" if r.drifting else "ok" if r.drifting is False else "-"
        value = "-" if r.value is None else f"{r.value:.4g}"
        thr = "-" if r.threshold is None else f"{r.threshold:.4g}"
        window = "-" if r.window is None else str(r.window)
        typer.echo(f"{r.feature:<24} {state:<9} {r.statistic:<11} {value:>9} {thr:>9} "
                   f"{r.consecutive:>8} {window:>6}")
    if png is not None:
        n = drift_report.render_png(rep, png)
        typer.echo(f"wrote {png} ({n} features)")


def register(app: typer.Typer) -> None:
    app.command("drift")(drift)
