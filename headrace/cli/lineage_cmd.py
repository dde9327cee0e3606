"""``headrace lineage``: a thin shell over ``headrace.ops.lineage``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from headrace.cli import _context
from headrace.contracts import RolloutRole
from headrace.core.errors import ValidationFailed

out = Console(highlight=False, soft_wrap=True)


def lineage(
    ctx: typer.Context,
    ref: Annotated[str | None, typer.Argument(
        help="TOPIC:PARTITION:OFFSET of a prediction (walk back), or NAME:VERSION (walk "
        "forward to the offset ranges it scored).")] = None,
    key: Annotated[str | None, typer.Option(
        "--key", help="Walk back from this key's latest prediction (with --stream).")] = None,
    stream: Annotated[str | None, typer.Option(
        "--stream", help="The stream (with --key; with NAME:VERSION: only this stream).")] = None,
    role: Annotated[RolloutRole | None, typer.Option(
        "--role", help="With NAME:VERSION: only the ranges it scored in this role.")] = None,
    rescore_with: Annotated[int | None, typer.Option(
        "--rescore-with", metavar="VERSION", help="With NAME:VERSION: print the `headrace "
        "replay` line that re-scores each range with NAME:VERSION (e.g. what a rolled-back "
        "canary scored).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Where a prediction came from (input record, model version, role, training job, dataset,
    TrainRequested), or which offsets a model version scored (from the lineage index)."""
    from headrace.ops import lineage as lin

    settings = _context.settings(ctx)
    topics = _context.control_topics(ctx)
    if (ref is None) == (key is None):
        raise ValidationFailed("give TOPIC:PARTITION:OFFSET, NAME:VERSION or --key K --stream S")
    if key is not None and stream is None:
        raise ValidationFailed("--key needs --stream")
    conn = _context.connection(ctx)
    version_ref = lin.parse_version_ref(ref) if ref is not None else None
    if version_ref is not None:
        name, version = version_ref
        ranges = lin.scored_ranges(conn, topics, name, version, stream=stream, role=role)
        if as_json:
            out.print_json(json.dumps([json.loads(r.model_dump_json(exclude={"schema_version"}))
                                       for r in ranges]))
            return
        if not ranges:
            out.print(f"{name}:{version} scored nothing the lineage index knows of")
            return
        table = Table("stream", "topic", "partition", "first", "last", "records", "role")
        for r in ranges:
            table.add_row(r.stream, r.topic, str(r.partition), str(r.first), str(r.last),
                          str(r.records), r.role.value)
        out.print(table)
        if rescore_with is not None:
            for r in ranges:
                out.print(lin.replay_command(r, name, rescore_with))
        return
    if key is not None and stream is not None:
        wheres = lin.latest_for_key(conn, stream, key)
    else:
        assert ref is not None
        wheres = [lin.parse_where(ref)]
    index = lin.read_index(conn, topics.lineage)
    traces = [lin.trace(conn, settings.dfs_root, topics, w, index=index) for w in wheres]
    if as_json:
        out.print_json(json.dumps([t.as_dict() for t in traces], default=str))
        return
    for t in traces:
        _show(t)


def _show(t: object) -> None:
    from headrace.ops.lineage import Trace

    assert isinstance(t, Trace)
    req = t.train_requested or {}
    ds = t.dataset or {}
    rows = [("prediction", str(t.prediction)), ("key", t.key or "-"),
            ("input record", str(t.source)),
            ("input", json.dumps(t.source_value, default=str)[:200]),
            ("model", f"{t.model_name}:{t.version}"), ("role", t.role.value),
            ("training job", t.job_id or "-"),
            ("dataset", f"{ds.get('uri', '-')} sha256 {ds.get('fingerprint', '-')}"
             if ds else "-"),
            ("code version", t.code_version or "-"),
            ("TrainRequested", f"event {req.get('event_id', '-')} by "
             f"{(req.get('trigger') or {}).get('kind', '-')} at {req.get('created_at', '-')}"
             if req else "-")]
    table = Table("", "", show_header=False)
    for k, v in rows:
        table.add_row(k, escape(v))
    out.print(table)
    for note in t.notes:
        out.print(f"note: {escape(note)}")


def register(app: typer.Typer) -> None:
    app.command("lineage")(lineage)
