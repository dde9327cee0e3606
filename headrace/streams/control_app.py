"""The control-plane faust app: train requests in, a job table backed by a changelog topic,
a periodic tick for the executor and schedules, and record counters for event rules.

The logic lives in ``headrace.trainers.control`` and is handed in as plain callbacks, so this
module is the only one of the control plane that imports faust.

Embedded broker (Tansu) notes, found by the spike and kept as settings here:

* Tansu reports a wrong high watermark after a multi-record batch, which makes faust's table
  recovery stop early and lose state. Every record is therefore produced in its own batch
  (``producer_max_batch_size=1``); the control plane writes a few records a second, so the cost
  is nil. Real Kafka does not need it.
* A new group member gets its assignment after ~max.poll.interval/10, so the session and poll
  intervals are short, as in ``clients.CONSUMER_DEFAULTS``.
* Topics are created up front with the partition counts the tables expect (auto-created
  topics get the broker's default count and faust refuses a mismatch).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
from mode import Worker

from headrace.core.errors import HeadraceError, PermanentError, RecordRef
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import EventSink
from headrace.streams.topics import ControlTopics

log = logging.getLogger(__name__)

Table = MutableMapping[str, Any]


@dataclass
class ControlHooks:
    """Callbacks into the control-plane logic; all run on the app's event loop and are short."""

    # A raw TrainRequested record and the job table; raise PermanentError to dead-letter it.
    on_request: Callable[[RecordRef, Table], None]
    # Every tick, with the job table (after recovery): drive the executor.
    on_tick: Callable[[Table], None]
    # Every tick on the leader only, with the schedules table (backed by events.schedules).
    on_schedules: Callable[[Table], object] | None = None
    # New records on data.<stream>: (stream, how many, the counters table).
    on_data: Callable[[str, int, Table], object] | None = None
    # Once, after the tables are recovered: resubmit jobs that were queued or running.
    on_ready: Callable[[Table], None] | None = None
    on_stop: Callable[[], None] | None = None


@dataclass(frozen=True)
class ControlAppConfig:
    conn: KafkaConnection
    topics: ControlTopics = field(default_factory=ControlTopics)
    app_id: str = "headrace-control"
    data_streams: tuple[str, ...] = ()
    tick_s: float = 0.25
    datadir: Path | None = None


def build_app(cfg: ControlAppConfig, hooks: ControlHooks) -> faust.App:
    """A faust app wired to ``hooks``; run it with :func:`run_control_app`."""
    app_id = f"{cfg.topics.prefix}-{cfg.app_id}" if cfg.topics.prefix else cfg.app_id
    datadir = cfg.datadir or Path(tempfile.mkdtemp(prefix="headrace-control-"))
    app = faust.App(
        app_id,
        broker=f"kafka://{cfg.conn.bootstrap}",
        broker_credentials=None,
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_partitions=1,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_max_poll_interval=10.0,
        producer_max_batch_size=1,  # see the module notes: Tansu's high watermark
        producer_linger=0.0,
    )
    requests = app.topic(cfg.topics.train_requests, value_type=bytes, value_serializer="raw",
                         key_type=bytes, key_serializer="raw", partitions=1)
    jobs: Any = app.Table("jobs", default=None, partitions=1, use_partitioner=True)
    schedules: Any = app.Table(
        "schedules", default=None, partitions=1, use_partitioner=True,
        changelog_topic=app.topic(cfg.topics.schedules, partitions=1, compacting=True))
    counters: Any = app.Table("rule-counters", default=None, partitions=1,
                              use_partitioner=True)
    sink: dict[str, EventSink] = {}

    def _sink() -> EventSink:
        if "s" not in sink:
            sink["s"] = EventSink(cfg.conn)
        return sink["s"]

    @app.agent(requests)
    async def route(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            record = RecordRef(
                topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key,
                value=msg.value, headers=tuple((k, v or b"") for k, v in (msg.headers or [])),
                timestamp_ms=int(msg.timestamp * 1000) if msg.timestamp else None)
            try:
                hooks.on_request(record, jobs)
            except PermanentError as exc:
                _sink().dead_letter(cfg.topics.train_requests_dlq, record, exc,
                                    stage=exc.stage or "route")
            except HeadraceError as exc:  # retriable here would block the partition: log it
                log.error("train request at offset %s: %s", msg.offset, exc)

    state = {"ready": False}

    @app.timer(cfg.tick_s)
    async def tick() -> None:
        if not state["ready"]:
            if not app.tables.recovery.completed.is_set():  # type: ignore[attr-defined]
                return
            state["ready"] = True
            if hooks.on_ready is not None:
                hooks.on_ready(jobs)
        try:
            hooks.on_tick(jobs)
            if hooks.on_schedules is not None and app.is_leader():
                hooks.on_schedules(schedules)
        except HeadraceError as exc:  # one bad tick must not stop the control plane
            log.error("control-plane tick: %s", exc)

    if hooks.on_data is not None and cfg.data_streams:
        on_data = hooks.on_data
        for stream_name in cfg.data_streams:
            data_topic = app.topic(cfg.topics.data(stream_name), value_type=bytes,
                                   value_serializer="raw", key_type=bytes, key_serializer="raw")

            def make_counter(name: str) -> Callable[[Any], Any]:
                async def count(stream: Any) -> None:
                    async for batch in stream.take(10_000, within=cfg.tick_s):
                        on_data(name, len(batch), counters)
                count.__name__ = f"count_{name.replace('-', '_')}"
                return count

            app.agent(data_topic, name=f"count-{stream_name}")(make_counter(stream_name))

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def _stop(app_: Any, **kw: Any) -> None:
        if hooks.on_stop is not None:
            hooks.on_stop()
        if "s" in sink:
            sink["s"].close()

    return app


def run_control_app(cfg: ControlAppConfig, hooks: ControlHooks) -> None:
    """Create the topics, run the app in the foreground until SIGTERM/SIGINT."""
    ensure_topics(cfg.conn, cfg.topics.specs(data_streams=cfg.data_streams))
    app = build_app(cfg, hooks)
    worker = Worker(app, loglevel="warning", quiet=True, override_logging=False,
                    redirect_stdouts=False)
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()


def request_stop() -> None:
    """Ask the worker in this process to shut down (as SIGTERM does)."""
    os.kill(os.getpid(), signal.SIGTERM)
