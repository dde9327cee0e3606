"""The help listing every command group of ``headrace`` uses."""

from __future__ import annotations

from typer._click.core import Context as ClickContext
from typer._click.formatting import HelpFormatter
from typer.core import TyperGroup


class HelpGroup(TyperGroup):
    """Lists subcommands with their whole first sentence, wrapped to the terminal, instead of
    click's default of cutting it at about 45 characters with "..."."""

    def format_commands(self, ctx: ClickContext, formatter: HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=400)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
