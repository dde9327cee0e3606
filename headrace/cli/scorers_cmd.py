"""`headrace score STREAM`: a thin shell over headrace.scorers.serving."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Annotated

import typer

from headrace.cli import _context
from headrace.core.settings import Settings
from headrace.scorers.serving import install_signal_handlers, run
from headrace.scorers.settings import ScorerSettings, load_scorer_settings
from headrace.streams.clients import KafkaConnection


def score(
    ctx: typer.Context,
    stream: Annotated[str, typer.Argument(help="Stream to score: reads data.STREAM.")],
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Model name (default: the stream name); follows its production "
        "alias.")] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", help="Most rows per micro-batch (env HEADRACE_SCORER_BATCH_SIZE).",
        min=1)] = None,
    max_wait_ms: Annotated[int | None, typer.Option(
        "--max-wait-ms", help="Longest wait to fill a batch (env HEADRACE_SCORER_MAX_WAIT_MS).",
        min=0)] = None,
    partitions: Annotated[str | None, typer.Option(
        "--partitions", help='Own these partitions, e.g. "0,3" (default: consumer group).')
    ] = None,
    transactional: Annotated[bool | None, typer.Option(
        "--transactional/--at-least-once", help="Consume-transform-produce transactions.")
    ] = None,
    idempotent: Annotated[bool | None, typer.Option(
        "--idempotent/--no-idempotent", help="Idempotent prediction producer (default on; off: "
        "~3x faster on the embedded broker, duplicates possible and detectable).")] = None,
    http_port: Annotated[int | None, typer.Option(
        "--http-port", help="Port of /livez /readyz /metrics (default 8080; 0: any).",
        min=0, max=65535)] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help='"auto", "cpu" or "gpu:N".')] = None,
    grace_s: Annotated[float | None, typer.Option(
        "--grace-s", help="SIGTERM grace period in seconds (default 20).")] = None,
    decode_processes: Annotated[int | None, typer.Option(
        "--decode-processes", help="Helper processes decoding JSON ahead of scoring "
        "(default 1; 0: none).", min=0, max=64)] = None,
    top_k: Annotated[int | None, typer.Option(
        "--top-k", help="Labels with scores in each prediction of a classifier (default 5 "
        "when it has more than 10 classes, else none; 0: none).", min=0, max=1000)] = None,
    max_batch_bytes: Annotated[int | None, typer.Option(
        "--max-batch-bytes", help="Most decoded bytes per micro-batch (an Arrow message "
        "counted from its metadata; default 64 MiB).", min=1024)] = None,
) -> None:
    """Score a stream until SIGTERM: predictions.STREAM, bad input to data.STREAM.dlq."""
    where = _context.service(ctx, "score", own_broker=False)
    for line in where.lines():
        print(line, file=sys.stderr, flush=True)
    settings = where.settings
    scorer = load_scorer_settings(
        stream=stream, model=model, batch_size=batch_size, max_wait_ms=max_wait_ms,
        partitions=partitions, transactional=transactional, idempotent=idempotent,
        http_port=http_port, device=device, grace_s=grace_s,
        decode_processes=decode_processes, top_k=top_k, max_batch_bytes=max_batch_bytes)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    install_signal_handlers(stop, grace_s=scorer.grace_s)
    with _context.service_connection(where) as conn:
        for line in _waiting_for(conn, settings, scorer):
            print(line, file=sys.stderr, flush=True)
        run(settings, scorer, stop, conn=conn)


def _waiting_for(conn: KafkaConnection, settings: Settings, scorer: ScorerSettings) -> list[str]:
    """What the scorer will wait for before it scores anything, in plain words."""
    from headrace.store.versions import read_alias
    from headrace.streams.clients import list_topics
    from headrace.streams.topics import data_topic

    name, alias, topic = scorer.model_name, scorer.alias, data_topic(scorer.stream)
    lines = [f"scoring {topic} on {conn.bootstrap} with model {name}@{alias} from "
             f"{settings.dfs_root / 'models' / name}"]
    if read_alias(settings.dfs_root, name, alias) is None:
        lines.append(f"waiting for model {name}: it has no {alias} version yet; scoring starts "
                     f"when one is published (e.g. `headrace train {name} ...`; "
                     "`headrace models list` shows what there is)")
    if topic not in list_topics(conn):
        lines.append(f"waiting for records: {topic} does not exist yet, so stream "
                     f"{scorer.stream} is new here (a typo? `headrace topics` lists the "
                     "streams)")
    return lines


def register(app: typer.Typer) -> None:
    app.command("score")(score)
