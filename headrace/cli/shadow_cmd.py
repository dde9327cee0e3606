"""``headrace models shadow NAME:VERSION [--stream S] [--stop]``: a thin shell over
``headrace.ops.rollout.control``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from headrace.cli import _context
from headrace.cli.trainers_cmd import PrefixOpt, _topics, models_app
from headrace.contracts import RolloutRole
from headrace.core.errors import PermanentError
from headrace.ops.rollout import control as rollout_control

console = Console()


@models_app.command("shadow")
def models_shadow(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="The candidate, NAME:VERSION (with --stop: NAME "
                                            "or NAME:VERSION).")],
    stream: Annotated[str | None, typer.Option(
        "--stream", "-s", help="The stream whose scorers run it (default: the model's name).")]
        = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the stream's shadow.")] = False,
    topic_prefix: PrefixOpt = "",
) -> None:
    """Run a candidate beside production on every scorer of a stream: its predictions go to
    predictions.STREAM.shadow, the live comparison to control.rollout.live."""
    topics = _topics(ctx, topic_prefix)
    if stop:
        name = ref.partition(":")[0]
        conn = _context.connection(ctx)
        now = rollout_control.current_rollout(conn, stream or name, topics=topics)
        if now is not None and now.role not in (None, RolloutRole.SHADOW):
            raise PermanentError(f"stream {now.stream} runs a {now.role.value} of "
                                 f"{now.model_name}:{now.candidate_version}, not a shadow; "
                                 f"`models shadow --stop` stops only a shadow")
        st = rollout_control.stop_rollout(conn=conn, stream=stream or name, model_name=name,
                                          topics=topics)
        console.print(f"stopped the rollout of {st.model_name} on stream {st.stream}")
        return
    st = rollout_control.start_shadow(root=_context.base_settings(ctx).dfs_root,
                                      conn=_context.connection(ctx), ref=ref, stream=stream,
                                      topics=topics)
    console.print(f"{st.model_name}:{st.candidate_version} shadows production on stream "
                  f"{st.stream}: predictions.{st.stream}.shadow")
