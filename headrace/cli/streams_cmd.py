"""`headrace broker | topics | send | tail`: thin shells over headrace.streams."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from headrace.cli import _context
from headrace.core.errors import ConfigError, HeadraceError, ValidationFailed
from headrace.streams import topics as topic_names
from headrace.streams.broker import MEMORY_ONLY_NOTICE, EmbeddedBroker, clear_state, write_state
from headrace.streams.clients import ensure_topics, list_topics
from headrace.streams.connection import connection_for
from headrace.streams.schema_registry import SchemaRegistry, registry_config
from headrace.streams.sending import (
    bad_lines_message,
    read_checked,
    send_table,
    write_side_file,
)
from headrace.streams.summaries import summarise
from headrace.streams.tailing import TailedMessage, tail

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


def broker(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1; 0 picks a free one.",
                                      min=0, max=65535)] = 0,
    create_topics: Annotated[bool, typer.Option(
        "--create-topics/--no-create-topics", help="Create the topic catalog on start.")] = True,
) -> None:
    """Run the embedded broker in the foreground until Ctrl-C (data is kept in memory only)."""
    settings = _context.base_settings(ctx)
    root = ctx.find_object(_context.CliContext)
    if root is not None and root.bootstrap:
        raise ConfigError("`headrace broker` starts its own broker; drop --bootstrap")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    b = EmbeddedBroker(port=port or settings.embedded_port).start()
    try:
        write_state(b)
        if create_topics:
            ensure_topics(connection_for(settings, b.bootstrap), topic_names.catalog(settings))
        out.print(f"Kafka broker listening on [bold]{b.bootstrap}[/]")
        out.print(f"export HEADRACE_BOOTSTRAP={b.bootstrap}")
        err.print(f"note: {MEMORY_ONLY_NOTICE}")
        while not stop.wait(0.5):
            if not b.running:
                raise ConfigError("the embedded broker exited unexpectedly")
    finally:
        clear_state()
        b.stop()
        out.print("broker stopped")


def topics(
    ctx: typer.Context,
    create: Annotated[bool, typer.Option("--create", help="Create missing topics.")] = False,
    stream: Annotated[list[str] | None, typer.Option(
        "--stream", help="A stream beyond HEADRACE_STREAMS (its data, predictions and dlq "
        "topics); repeat.")] = None,
) -> None:
    """List the topic catalog and what the cluster holds; --create makes the missing ones."""
    settings = _context.settings(ctx)
    if stream:
        settings = settings.with_overrides(
            streams=list(dict.fromkeys([*settings.streams, *stream])))
    conn = _context.connection(ctx)
    if create:
        made = ensure_topics(conn, topic_names.catalog(settings),
                             replication_factor=settings.replication_factor)
        for name in made:
            out.print(f"created {name}")
    existing = list_topics(conn)
    table = Table("topic", "partitions", "exists", "purpose")
    catalog_names = set()
    for spec in topic_names.catalog(settings):
        catalog_names.add(spec.name)
        have = existing.get(spec.name)
        table.add_row(spec.name, str(have if have is not None else spec.partitions),
                      "yes" if have is not None else "no", spec.purpose)
    for name in sorted(set(existing) - catalog_names):
        table.add_row(name, str(existing[name]), "yes", "")
    out.print(table)


def send(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="Stream name; records go to data.<stream>.")],
    file: Annotated[Path, typer.Argument(help="A .jsonl, .csv or .parquet file, or a folder "
                                         "of .png/.jpg images (one record per file).")],
    fmt: Annotated[str, typer.Option("--format", help="json: a message per record (images "
                                     "as base64); arrow: Arrow IPC batches; raw: a message per "
                                     "image, its bytes as they are; avro: a message per record "
                                     "in the Schema Registry wire format (--schema).")] = "json",
    schema: Annotated[Path | None, typer.Option(
        "--schema", help="--format avro: the records' Avro schema (.avsc), registered under "
        "data.<stream>-value in HEADRACE_SCHEMA_REGISTRY_URL's registry.")] = None,
    batch_rows: Annotated[int, typer.Option(help="Rows per Arrow message.", min=1)] = 10_000,
    key: Annotated[str | None, typer.Option(help="Column to use as the message key (an image "
                                            "folder: the file name).")] = None,
    skip_bad: Annotated[bool, typer.Option(
        "--skip-bad", help="Send the good records; write the bad lines to NAME.bad.SUFFIX.")]
        = False,
    model: Annotated[str | None, typer.Option(
        "--model", help="Type columns by this model's inputs (default: the stream's name).")]
        = None,
    image_input: Annotated[str, typer.Option(
        "--image-input", help="An image folder: the model input the images go to.")
    ] = "image",
) -> None:
    """Publish a file's records (or a folder's images) to data.<stream>."""
    if fmt not in ("json", "arrow", "raw", "avro"):
        raise typer.BadParameter("must be json, arrow, raw or avro", param_hint="--format")
    if (fmt == "avro") != (schema is not None):
        raise typer.BadParameter("--format avro and --schema FILE.avsc go together",
                                 param_hint="--schema")
    topic = topic_names.data_topic(stream)
    settings = _context.settings(ctx)
    if fmt == "avro":
        assert schema is not None
        _send_avro(ctx, stream, file, schema, key, skip_bad)
        return
    numeric, strings = _model_columns(settings.dfs_root, model or stream)
    got = read_checked(file, numeric=numeric, strings=strings,  # the whole file, before Kafka
                       image_column=image_input)
    if got.bad and not skip_bad:
        raise ValidationFailed(bad_lines_message(file, got))
    warning = _missing_inputs(settings.dfs_root, model or stream, got.table.column_names)
    if warning:
        err.print(f"warning: {warning}", highlight=False, markup=False, soft_wrap=True)
    if key is None and file.is_dir():
        key = "key"
    conn = _context.connection(ctx)
    existing = list_topics(conn)
    if topic not in existing and stream not in settings.streams:
        raise ValidationFailed(
            f"unknown stream {stream}: {topic} does not exist on {conn.bootstrap} (streams "
            f"there: {', '.join(_streams_in(existing)) or 'none'}); create it on purpose "
            f"with `headrace topics --create --stream {stream}`")
    # The stream's three topics, so `tail predictions.STREAM` works before a scorer started.
    wanted = {topic, topic_names.predictions_topic(stream), topic_names.dlq_topic(stream)}
    missing = [s for s in topic_names.catalog(settings.with_overrides(streams=[stream]))
               if s.name in wanted and s.name not in existing]
    if missing:
        ensure_topics(conn, missing, replication_factor=settings.replication_factor)
    result = send_table(conn, topic, got.table, fmt=fmt, key_column=key,  # type: ignore[arg-type]
                        batch_rows=batch_rows)
    out.print(f"sent {result.rows} records in {result.messages} messages to {result.topic}")
    if got.bad:
        side = write_side_file(file, got)
        err.print(f"skipped {len(got.bad)} bad records, written to {side}:", highlight=False)
        for b in got.bad[:10]:
            err.print(f"  {b.describe()}", highlight=False, markup=False)


def _registry(ctx: typer.Context, *, needed: bool) -> SchemaRegistry | None:
    config = registry_config(_context.base_settings(ctx))
    if config is None and needed:
        raise ConfigError("no schema registry configured: set HEADRACE_SCHEMA_REGISTRY_URL "
                          "(`./dev registry` starts one on loopback)")
    return SchemaRegistry(config) if config is not None else None


def _send_avro(ctx: typer.Context, stream: str, file: Path, schema: Path, key: str | None,
               skip_bad: bool) -> None:
    from headrace.streams.avro_records import as_read_records, read_avro_file, send_avro

    registry = _registry(ctx, needed=True)
    assert registry is not None
    got = read_avro_file(file, schema)  # the whole file, before the registry and Kafka
    if got.bad and not skip_bad:
        raise ValidationFailed(bad_lines_message(file, as_read_records(got)))
    topic = topic_names.data_topic(stream)
    conn = _context.connection(ctx)
    settings = _context.settings(ctx)
    existing = list_topics(conn)
    if topic not in existing and stream not in settings.streams:
        raise ValidationFailed(
            f"unknown stream {stream}: {topic} does not exist on {conn.bootstrap}; create it "
            f"on purpose with `headrace topics --create --stream {stream}`")
    wanted = {topic, topic_names.predictions_topic(stream), topic_names.dlq_topic(stream)}
    missing = [s for s in topic_names.catalog(settings.with_overrides(streams=[stream]))
               if s.name in wanted and s.name not in existing]
    if missing:
        ensure_topics(conn, missing, replication_factor=settings.replication_factor)
    result, schema_id = send_avro(conn, topic, got, registry, key_column=key)
    out.print(f"sent {result.rows} records as Avro (schema id {schema_id}, subject "
              f"{topic}-value) to {result.topic}")
    if got.bad:
        side = write_side_file(file, as_read_records(got))
        err.print(f"skipped {len(got.bad)} bad records, written to {side}:", highlight=False)
        for b in got.bad[:10]:
            err.print(f"  {b.describe()}", highlight=False, markup=False)


def _model_columns(root: Path, model: str) -> tuple[list[str], list[str]]:
    """Columns the stream's production model takes as numbers and as strings, if it has one
    (each input's codec says how ``send`` types its fields)."""
    from headrace.codecs import codec
    from headrace.store.versions import resolve

    try:
        mv = resolve(root, model)
    except HeadraceError:
        return [], []
    numeric: list[str] = []
    strings: list[str] = []
    typed = {"number": numeric, "string": strings}
    for inp in mv.manifest.input_signature():
        c = codec(inp.kind)
        if c.send_as is not None:
            typed[c.send_as].extend(c.fields(inp))
    return numeric, strings


def _missing_inputs(root: Path, model: str, columns: list[str]) -> str | None:
    """What the records lack of the production model's inputs, said before anything is sent
    (the scorer would dead-letter every such record), or None."""
    from headrace.codecs import codec
    from headrace.store.versions import resolve

    try:
        mv = resolve(root, model)
    except HeadraceError:
        return None  # no model yet: nothing to check against
    have = set(columns)
    needed: list[str] = []
    for inp in mv.manifest.input_signature():
        needed.extend(codec(inp.kind).fields(inp))
    missing = [c for c in needed if c not in have]
    if not missing:
        return None
    shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8 else "")
    return (f"the records lack {len(missing)} of the {len(needed)} inputs of model "
            f"{mv.name}:{mv.version} ({shown}); the scorer will dead-letter them "
            f"(`headrace models show {mv.name}` lists its inputs)")


def _streams_in(existing: dict[str, int]) -> list[str]:
    return sorted(t[len("data."):] for t in existing
                  if t.startswith("data.") and not t.endswith(".dlq"))


Shown = dict[str, Callable[[Any], Any]]


def _field_summaries(root: Path, topic: str) -> Shown:
    """How ``tail`` shows each field of a data topic: by the kind of the stream's model's input
    that reads it (its codec's ``summary``); empty when there is no such model."""
    from headrace.codecs import REGISTRY
    from headrace.store.versions import resolve

    if not topic.startswith("data.") or topic.endswith(".dlq"):
        return {}
    try:
        mv = resolve(root, topic[len("data."):])
    except (HeadraceError, OSError):
        return {}
    out: Shown = {}
    for inp in mv.manifest.input_signature():
        c = REGISTRY.get(str(inp.kind))
        if c is not None:
            out.update(dict.fromkeys(c.fields(inp), c.summary))
    return out


def shown(value: Any, by_field: Shown) -> Any:
    """A record (or Arrow rows) with each field summarised by its kind, the rest (and any
    other value) by ``summarise`` (images and big tensors as one-line summaries)."""
    if isinstance(value, dict) and by_field:
        return {k: by_field.get(k, summarise)(v) for k, v in value.items()}
    if isinstance(value, list) and by_field and all(isinstance(r, dict) for r in value):
        return [shown(r, by_field) for r in value]
    return summarise(value)


def _print(msg: TailedMessage, as_json: bool, by_field: Shown | None = None) -> None:
    value = shown(msg.value, by_field or {})
    if as_json:  # plain: rich would parse and colour it again (seconds for a big record)
        print(json.dumps({
            "topic": msg.topic, "partition": msg.partition, "offset": msg.offset,
            "timestamp_ms": msg.timestamp_ms, "key": msg.key, "headers": msg.headers,
            **({"schema_id": msg.schema_id} if msg.schema_id is not None else {}),
            "value": value}, default=str, ensure_ascii=False))
        return
    head = " ".join(f"{_clip(k)}={_clip(v)}" for k, v in msg.headers.items())
    if msg.schema_id is not None:
        head = f"schema-id={msg.schema_id} {head}".rstrip()
    out.print(f"[dim]{msg.topic}\\[{msg.partition}]@{msg.offset} key={escape(_clip(str(msg.key)))} "
              f"{escape(head)}[/]")
    out.print(json.dumps(value, default=str) if not isinstance(value, str) else value,
              markup=False)


def _clip(text: str, most: int = 200) -> str:
    """A key or header as long as anyone may write one, cut for the line that names it."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def tail_cmd(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to read, e.g. data.demo.")],
    from_beginning: Annotated[bool, typer.Option("--from-beginning",
                                                 help="Start at the oldest message.")] = False,
    max_messages: Annotated[int | None, typer.Option("--max", min=1,
                                                     help="Stop after N messages.")] = None,
    idle_timeout: Annotated[float | None, typer.Option(
        "--idle-timeout", min=0, help="Stop after this many seconds without a message.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print decoded messages with their headers."""
    conn = _context.connection(ctx)
    by_field = _field_summaries(_context.settings(ctx).dfs_root, topic)
    registry = _registry(ctx, needed=False)
    for msg in tail(conn, topic, from_beginning=from_beginning, max_messages=max_messages,
                    idle_timeout_s=idle_timeout, registry=registry):
        _print(msg, as_json, by_field)


def register(app: typer.Typer) -> None:
    app.command()(broker)
    app.command()(topics)
    app.command()(send)
    app.command("tail")(tail_cmd)
