"""``headrace datasets put | list | show``: thin shells over ``headrace.trainers.dataset_files``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from headrace.cli import _context
from headrace.store.signature import InputKind, Kind

if TYPE_CHECKING:  # the trainer's modules (and the image decoder) load when a command runs
    from headrace.trainers import dataset_files

console = Console()


def _kinds(values: list[str]) -> dict[str, Kind]:
    from headrace import codecs

    out: dict[str, Kind] = {}
    for v in values:
        col, _, kind = v.partition("=")
        try:
            out[col] = codecs.kind(kind)
        except codecs.UnknownKind:
            raise typer.BadParameter(
                f"{v!r}: use COLUMN=KIND with KIND one of "
                f"{', '.join([*codecs.REGISTRY, InputKind.LABEL.value])}", param_hint="--kind"
            ) from None
    return out


def _print(info: dataset_files.DatasetInfo) -> None:
    console.print(f"[bold]{info.uri}[/bold]: {info.rows} rows, {info.bytes} bytes, "
                  f"fingerprint {info.fingerprint}")
    table = Table("column", "kind", "type")
    for c, kind in info.kinds.items():
        table.add_row(escape(c), kind, escape(info.types.get(c, "")))
    console.print(table)
    if info.label_counts:
        counts = Table(f"{info.label} (label)", "rows")
        for v, n in info.label_counts.items():
            counts.add_row(escape(v), str(n))
        console.print(counts)


def put(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A .parquet, .csv or .jsonl file, or an image "
                                               "folder (one sub-folder per class).")],
    name: Annotated[str | None, typer.Option(help="Dataset name (default: the file's).")]
        = None,
    label: Annotated[str, typer.Option(help="Label column.")] = "label",
    image_column: Annotated[list[str] | None, typer.Option(
        help="Force a column to be images (encoded bytes).")] = None,
    text_column: Annotated[list[str] | None, typer.Option(
        help="Force a column to be text.")] = None,
    kind: Annotated[list[str] | None, typer.Option(
        help="Force a column's kind: COLUMN=numeric|category|tensor|image|text.")] = None,
) -> None:
    """Copy a file or image folder to datasets/NAME.parquet with its column kinds."""
    from headrace.trainers import dataset_files

    info = dataset_files.put_dataset(
        root=_context.base_settings(ctx).dfs_root, path=path, name=name, label=label,
        image_columns=tuple(image_column or ()), text_columns=tuple(text_column or ()),
        kinds=_kinds(kind or []))
    _print(info)
    if info.label is None:  # training this dataset would fail on the missing label
        Console(stderr=True).print(
            f"warning: {path.name} has no label column {label!r} (columns: "
            f"{', '.join(info.kinds)}); name it with `--label COLUMN` to train on it",
            highlight=False, markup=False, soft_wrap=True)


def list_(ctx: typer.Context) -> None:
    """Datasets under datasets/ on the DFS."""
    from headrace.trainers import dataset_files

    table = Table("dataset", "rows", "bytes")
    for d in dataset_files.list_datasets(root=_context.base_settings(ctx).dfs_root):
        table.add_row(d.uri, str(d.rows), str(d.bytes))
    console.print(table)


def show(ctx: typer.Context, name: str,
         label: Annotated[str | None, typer.Option(
             help="Label column (default: the one `datasets put` recorded).")] = None) -> None:
    """Schema, column kinds and label counts of a dataset."""
    from headrace.trainers import dataset_files

    _print(dataset_files.show_dataset(root=_context.base_settings(ctx).dfs_root, name=name,
                                      label=label))


def register(app: typer.Typer) -> None:
    app.command("put")(put)
    app.command("list")(list_)
    app.command("show")(show)
