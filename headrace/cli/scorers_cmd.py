"""`headrace score STREAM`: a thin shell over headrace.scorers.serving."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from headrace.cli import _context
from headrace.core.errors import ValidationFailed
from headrace.core.settings import Settings
from headrace.scorers.engine.settings import ScorerSettings, load_scorer_settings
from headrace.streams.clients import KafkaConnection

if TYPE_CHECKING:
    from headrace.scorers.serving import Scorer


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
    runtime: Annotated[str | None, typer.Option(
        "--runtime", help="What runs models: tensorflow (default), jax or torch (Keras "
        "models), onnxruntime (each version's ONNX export) (env HEADRACE_SCORER_RUNTIME).")] = None,
    precision: Annotated[str | None, typer.Option(
        "--precision", help="Torch models: fp32 (default), bf16, or fp16 (a GPU only); the "
        "share of sampled labels equal to fp32's is on /metrics (env "
        "HEADRACE_SCORER_PRECISION).")] = None,
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
    create: Annotated[bool, typer.Option(
        "--create", help="Score a stream that does not exist yet (and is not in "
        "HEADRACE_STREAMS): its topics are created.")] = False,
) -> None:
    """Score a stream until SIGTERM: predictions.STREAM, bad input to data.STREAM.dlq."""
    where = _context.service(ctx, "score", own_broker=False)
    for line in where.lines():
        print(line, file=sys.stderr, flush=True)
    settings = where.settings
    scorer = load_scorer_settings(
        stream=stream, model=model, batch_size=batch_size, max_wait_ms=max_wait_ms,
        partitions=partitions, transactional=transactional, idempotent=idempotent,
        http_port=http_port, device=device, runtime=runtime, precision=precision, grace_s=grace_s,
        decode_processes=decode_processes, top_k=top_k, max_batch_bytes=max_batch_bytes)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from headrace.scorers.serving import Scorer, install_signal_handlers  # the scorer extra's

    stop = threading.Event()
    install_signal_handlers(stop, grace_s=scorer.grace_s)
    with _context.service_connection(where) as conn:
        if not create:
            _refuse_unknown_stream(conn, settings, scorer)
        for line in _waiting_for(conn, settings, scorer):
            print(line, file=sys.stderr, flush=True)
        worker = Scorer(settings, scorer, conn=conn)
        threading.Thread(target=_say_probes, args=(worker, scorer.http_host, stop),
                         name="probes-address", daemon=True).start()
        worker.run(stop)


def _say_probes(worker: Scorer, host: str, stop: threading.Event) -> None:
    """Print where the probes and metrics listen once bound (``--http-port 0``: any port)."""
    while not worker.probes_up.wait(0.5):
        if stop.is_set():
            return
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    print(f"probes and metrics on http://{shown}:{worker.http_port} (/livez /readyz /metrics)",
          file=sys.stderr, flush=True)


def _refuse_unknown_stream(conn: KafkaConnection, settings: Settings,
                           scorer: ScorerSettings) -> None:
    """Like `send`: a stream whose topic does not exist and that is not configured is taken
    for a typo, not created, unless ``--create``."""
    from headrace.store.versions import list_models
    from headrace.streams.clients import list_topics
    from headrace.streams.topics import data_topic

    topic = data_topic(scorer.stream)
    existing = list_topics(conn)
    if topic in existing or scorer.stream in settings.streams:
        return
    streams = sorted(t[len("data."):] for t in existing
                     if t.startswith("data.") and not t.endswith(".dlq"))
    models = list_models(settings.dfs_root)
    raise ValidationFailed(
        f"unknown stream {scorer.stream}: {topic} does not exist on {conn.bootstrap} (streams "
        f"there: {', '.join(streams) or 'none'}; models in {settings.dfs_root / 'models'}: "
        f"{', '.join(models) or 'none'}); score a new stream on purpose with "
        f"`headrace score {scorer.stream} --create`")


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
                     f"{scorer.stream} is new here; its topics are created now")
    return lines


def register(app: typer.Typer) -> None:
    app.command("score")(score)
