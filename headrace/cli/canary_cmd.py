"""``headrace models canary NAME:VERSION --percent P --stream S [--steps ...] [--stop]``: a thin
shell over ``headrace.ops.rollout.canary``."""

from __future__ import annotations

from typing import Annotated

import typer

from headrace.cli import _context
from headrace.cli.trainers_cmd import PrefixOpt, _topics, console, models_app


def _percents(value: str | None) -> list[float]:
    if not value:
        return []
    try:
        return [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter("use comma-separated percents, e.g. 5,25,50,100",
                                 param_hint="--steps") from None


@models_app.command("canary")
def models_canary(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="NAME:VERSION to canary (NAME with --stop).")],
    stream: Annotated[str, typer.Option("--stream", help="Stream whose scorers route.")],
    percent: Annotated[float | None, typer.Option(
        "--percent", help="Share of the keys the candidate scores (0-100, exclusive).")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", help="Next percents, e.g. 5,25,50,100; reaching 100 promotes.")] = None,
    min_records: Annotated[int, typer.Option(
        "--min-records", help="Candidate records at a step before the next one.")] = 1000,
    max_error_margin: Annotated[float, typer.Option(
        "--max-error-margin",
        help="Roll back when the candidate's error rate is worse by more than this.")] = 0.01,
    min_labelled: Annotated[int, typer.Option(
        "--min-labelled",
        help="Labelled candidate records (labels.STREAM) at a step before the next one.")] = 0,
    max_accuracy_drop: Annotated[float | None, typer.Option(
        "--max-accuracy-drop",
        help="Roll back when the candidate's live accuracy (labels.STREAM) is worse by more "
             "than this (0-1).")] = None,
    stop: Annotated[bool, typer.Option("--stop", help="End the stream's canary.")] = False,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Route a salted-hash share of a stream's keys to a candidate; step up, promote or roll
    back by itself."""
    from headrace.ops.rollout import canary

    topics = _topics(ctx, topic_prefix)
    if stop:
        was = canary.stop_canary(conn=_context.connection(ctx), topics=topics, stream=stream,
                                 name=ref.partition(":")[0])
        if was is None:
            console.print(f"no canary of {ref.partition(':')[0]} on {stream}")
        else:
            console.print(f"stopped the canary of {was.model_name}:{was.candidate_version} on "
                          f"{stream}: production scores every record")
        return
    if percent is None:
        raise typer.BadParameter("give --percent (or --stop)", param_hint="--percent")
    planned = canary.plan_canary(root=_context.base_settings(ctx).dfs_root, ref=ref,
                                 stream=stream, percent=percent, steps=_percents(steps),
                                 min_records=min_records,
                                 max_error_rate_margin=max_error_margin,
                                 min_labelled=min_labelled, max_accuracy_drop=max_accuracy_drop)
    st = canary.publish_canary(conn=_context.connection(ctx), topics=topics, state=planned)
    assert st.canary is not None
    nxt = ", then " + " -> ".join(f"{s:g}%" for s in st.canary.steps) if st.canary.steps else ""
    every = f"every {min_records} candidate records" + (
        f" and {min_labelled} labelled ones" if min_labelled else "")
    drop = (f"; rolled back if its live accuracy drops by more than {max_accuracy_drop:g}"
            if max_accuracy_drop is not None else "")
    console.print(f"canary {st.model_name}:{st.candidate_version} on {stream}: "
                  f"{st.canary.percent:g}% of the keys{nxt} ({every}; salt "
                  f"{st.canary.salt}){drop}")
