"""``headrace labels send STREAM FILE``: late truth for a stream's live comparison
(``headrace.ops.labels``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from headrace.cli import _context

app = typer.Typer(name="labels", help="Late truth: labels for a stream's records, joined by "
                  "its scorers to each version's predictions.", no_args_is_help=True)


@app.command("send")
def send(ctx: typer.Context,
         stream: Annotated[str, typer.Argument(help="The stream the records went to.")],
         file: Annotated[Path, typer.Argument(help="JSONL ({\"key\": ..., \"label\": ...} a "
                                                   "line) or CSV (.csv, with both columns).")],
         key_column: Annotated[str, typer.Option("--key-column")] = "key",
         label_column: Annotated[str, typer.Option("--label-column")] = "label") -> None:
    """Publish each label to labels.STREAM keyed by its record's key, as the join reads it."""
    from headrace.ops.labels import send_labels

    got = send_labels(_context.connection(ctx), stream, file, key_column=key_column,
                      label_column=label_column)
    typer.echo(f"sent {got.sent} labels to {got.topic}"
               + (" (created the topic: scorers join labels from it within 5 s)"
                  if got.created else ""))


def register(root: typer.Typer) -> None:
    root.add_typer(app)
