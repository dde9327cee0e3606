"""``headrace code push | list``: model code packages on the DFS (``headrace.store.code``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from headrace.cli import _context
from headrace.store import code as code_store

console = Console()
app = typer.Typer(name="code", help="Your model code: packages stored immutably on the DFS.",
                  no_args_is_help=True)


@app.command("push")
def push(ctx: typer.Context,
         directory: Annotated[Path, typer.Argument(help="The package directory.")],
         name: Annotated[str, typer.Option("--name", "-n", help="Code name.")]) -> None:
    """Copy DIR to code/NAME/<sha256>/ and print NAME@<12 hex> (same bytes, same ref)."""
    cv = code_store.push(_context.base_settings(ctx).dfs_root, directory, name)
    typer.echo(cv.ref)


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """Every stored code version: name, reference, files, size, push time."""
    table = Table("name")
    table.add_column("ref", no_wrap=True, min_width=25)
    for col in ("files", "size", "pushed at (UTC)"):
        table.add_column(col, no_wrap=True)
    for cv in code_store.list_code(_context.base_settings(ctx).dfs_root):
        table.add_row(cv.name, cv.ref, str(len(cv.files)), f"{cv.size:,} B",
                      cv.pushed_at[:16].replace("T", " "))
    console.print(table)


def register(root: typer.Typer) -> None:
    root.add_typer(app)
