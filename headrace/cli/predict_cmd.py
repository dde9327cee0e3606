"""`headrace predict NAME[:VERSION] FILE|FOLDER [--json]`: a thin shell over
headrace.scorers.offline (the stream's decode and scoring core, offline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer

from headrace.cli import _context


def predict(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(
        help="NAME (its production version), NAME:VERSION or NAME@ALIAS.")],
    path: Annotated[Path, typer.Argument(
        help="A .jsonl, .csv or .parquet file (one record a row) or a folder of PNG/JPEG "
        "images (one record each, keyed by file name).")],
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print each prediction as the stream writes it (JSON lines).")] = False,
    top_k: Annotated[int | None, typer.Option(
        "--top-k", help="Labels with scores in each prediction of a classifier.",
        min=0, max=1000)] = None,
    runtime: Annotated[str, typer.Option(
        "--runtime", help="What runs the model: tensorflow (default), jax or torch (Keras "
        "models), onnxruntime (the version's ONNX export).")
    ] = "tensorflow",
    precision: Annotated[str, typer.Option(
        "--precision", help="Torch models: fp32 (default), bf16, or fp16 (a GPU only).")
    ] = "fp32",
) -> None:
    """Predict offline, exactly as the stream would: same decode, same model call."""
    from headrace.scorers.adapters import precision as precisions
    from headrace.scorers.adapters import select_runtime
    from headrace.scorers.offline import load, read_path  # the scorer extra's (Pillow): lazily

    settings = _context.base_settings(ctx)
    select_runtime(runtime)  # before the model (and so Keras) is imported
    precisions.select(precision)
    records, keys = read_path(path)
    m = load(settings.dfs_root, model, top_k=top_k)
    outputs = m.predict(records, keys=keys)
    failed = 0
    for out in outputs:
        rows = out.to_pylist() if isinstance(out, pa.Table) else [out]
        for row in rows:
            failed += "error" in row
            typer.echo(json.dumps(row, ensure_ascii=False) if as_json else _line(row))
    if failed:
        raise typer.Exit(1)


def _line(row: dict[str, Any]) -> str:
    key = row.get("key") if row.get("key") is not None else "-"
    if "error" in row:
        return f"{key}\terror ({row['stage']}): {row['error']}"
    label = row.get("label")
    scores = row.get("scores") or []
    if label is not None and scores:
        return f"{key}\t{label}\t{max(scores):.4f}"
    return f"{key}\t{json.dumps(scores if scores else row.get('outputs'))}"


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
