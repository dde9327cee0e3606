"""The control-plane faust app: train requests in, a job table backed by a changelog topic,
a periodic tick for the executor and schedules, record counters for event rules, and drift
episodes for drift rules (from ``events.drift``).

The logic lives in ``headrace.trainers.control`` and is handed in as plain callbacks, so this
module (with ``faust_kafka``) is the only one of the control plane that imports faust.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faust
from mode import Worker

from headrace.core.errors import ConfigError, FatalError, HeadraceError, RecordRef
from headrace.streams.clients import ensure_topics
from headrace.streams.producing import EventSink
from headrace.trainers.control import recovery
from headrace.trainers.control.app_config import (
    ControlAppConfig,
    ControlHooks,
    changelogs,
    topic_specs,
)
from headrace.trainers.control.faust_kafka import ControlApp, faust_broker_settings
from headrace.trainers.control.health import ControlHealth, HealthServer
from headrace.trainers.control.plane import Table
from headrace.trainers.control.record_handling import act_on_drift, record_of, route_request

log = logging.getLogger(__name__)


def _kafka_session(app: faust.App) -> bool:
    """Whether faust's aiokafka consumer has a group coordinator and a member id."""
    thread = getattr(app.consumer, "_thread", None)
    consumer = getattr(thread, "_consumer", None)
    coordinator = getattr(consumer, "_coordinator", None)
    return bool(coordinator is not None and getattr(coordinator, "coordinator_id", None)
                is not None and getattr(coordinator, "member_id", ""))


def build_app(cfg: ControlAppConfig, hooks: ControlHooks,
              health: ControlHealth | None = None) -> faust.App:
    """A faust app wired to ``hooks``; run it with :func:`run_control_app`."""
    health = health or ControlHealth(liveness_s=cfg.liveness_s)
    app = _new_app(cfg)
    jobs: Any = app.Table("jobs", default=None, partitions=1, use_partitioner=True)
    schedules: Any = app.Table(
        "schedules", default=None, partitions=1, use_partitioner=True,
        changelog_topic=app.topic(cfg.topics.schedules, partitions=1, compacting=True))
    counters: Any = app.Table("rule-counters", default=None, partitions=1,
                              use_partitioner=True)
    episodes: Any = app.Table("drift-episodes", default=None, partitions=1,
                              use_partitioner=True)
    sink: dict[str, EventSink] = {}

    def _sink() -> EventSink:
        if "s" not in sink:
            sink["s"] = EventSink(cfg.conn)
        return sink["s"]

    _add_router(app, cfg, hooks, health, jobs, _sink)
    _add_tick(app, cfg, hooks, health, jobs, schedules)
    if hooks.on_data is not None and cfg.data_streams:
        _add_counters(app, cfg, hooks.on_data, health, counters)
    if hooks.on_drift is not None:
        _add_drift_follower(app, cfg, hooks.on_drift, health, episodes)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def _stop(app_: Any, **kw: Any) -> None:
        if hooks.on_stop is not None:
            hooks.on_stop()
        if "s" in sink:
            sink["s"].close()

    return app


def _new_app(cfg: ControlAppConfig) -> faust.App:
    """The faust app with the broker's settings (see the module notes)."""
    datadir = cfg.datadir or Path(tempfile.mkdtemp(prefix="headrace-control-"))
    return ControlApp(
        cfg.full_app_id,
        **faust_broker_settings(cfg.conn),
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_partitions=1,
        topic_replication_factor=cfg.replication_factor,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_max_poll_interval=10.0,
        producer_max_batch_size=1,  # see the module notes: Tansu's high watermark
        producer_linger=0.0,
    )


def _add_router(app: faust.App, cfg: ControlAppConfig, hooks: ControlHooks,
                health: ControlHealth, jobs: Any, sink: Callable[[], EventSink]) -> None:
    """The agent that routes train requests into jobs (record_handling.route_request)."""
    requests = app.topic(cfg.topics.train_requests, value_type=bytes, value_serializer="raw",
                         key_type=bytes, key_serializer="raw", partitions=1)

    @app.agent(requests)
    async def route(stream: Any) -> None:
        with _crash_guard(health, "route"):
            async for event in stream.events():
                record = record_of(event.message)
                health.busy_since = health.clock()
                try:
                    await route_request(record, cfg=cfg, hooks=hooks, jobs=jobs, sink=sink)
                finally:
                    health.busy_since = None


def _add_tick(app: faust.App, cfg: ControlAppConfig, hooks: ControlHooks,
              health: ControlHealth, jobs: Any, schedules: Any) -> None:
    """The timer that drives the executor and, on the leader, the schedules; the first tick
    after the tables are recovered resubmits the jobs that were queued or running."""
    state = {"ready": False}

    @app.timer(cfg.tick_s)
    async def tick() -> None:
        health.tick(session=_kafka_session(app))
        if not state["ready"]:
            if not app.tables.recovery.completed.is_set():  # type: ignore[attr-defined]
                return
            state["ready"] = health.recovered = True
            if hooks.on_ready is not None:
                hooks.on_ready(jobs)
        try:
            hooks.on_tick(jobs)
            if hooks.on_schedules is not None and app.is_leader():
                hooks.on_schedules(schedules)
        except FatalError as exc:  # e.g. a producer that failed fatally twice
            _stop_failed(health, f"control-plane tick: {exc}")
        except HeadraceError as exc:  # one bad tick must not stop the control plane
            log.error("control-plane tick: %s", exc)


def _add_counters(app: faust.App, cfg: ControlAppConfig,
                  on_data: Callable[[str, int, Table], object], health: ControlHealth,
                  counters: Any) -> None:
    """One agent per data stream counting its new records for the event rules."""
    for stream_name in cfg.data_streams:
        data_topic = app.topic(cfg.topics.data(stream_name), value_type=bytes,
                               value_serializer="raw", key_type=bytes, key_serializer="raw")

        def make_counter(name: str) -> Callable[[Any], Any]:
            async def count(stream: Any) -> None:
                with _crash_guard(health, f"count-{name}"):
                    async for batch in stream.take(10_000, within=cfg.tick_s):
                        on_data(name, len(batch), counters)
            count.__name__ = f"count_{name.replace('-', '_')}"
            return count

        app.agent(data_topic, name=f"count-{stream_name}")(make_counter(stream_name))


def _add_drift_follower(app: faust.App, cfg: ControlAppConfig,
                        on_drift: Callable[[RecordRef, Table], object], health: ControlHealth,
                        episodes: Any) -> None:
    """The agent that hands events.drift records to the drift rules
    (record_handling.act_on_drift)."""
    drift = app.topic(cfg.topics.drift, value_type=bytes, value_serializer="raw",
                      key_type=bytes, key_serializer="raw", partitions=1)

    @app.agent(drift, name="drift-episodes")
    async def follow_drift(stream: Any) -> None:
        with _crash_guard(health, "drift-episodes"):
            async for event in stream.events():
                await act_on_drift(record_of(event.message), cfg=cfg, on_drift=on_drift,
                                   episodes=episodes)


@contextlib.contextmanager
def _crash_guard(health: ControlHealth, agent: str) -> Iterator[None]:
    """An exception out of an agent (not a cancellation: faust cancels on a rebalance): the
    process exits at once, non-zero. A crashed faust agent reads its topic no more while the
    process looks healthy (requests were consumed, committed and never run), and a graceful
    stop would commit the record it was on (faust acks it as the agent's loop unwinds); exiting
    here, before that, the restarted process reads it again. Jobs still running are adopted
    or resumed by the next start, as after any kill."""
    try:
        yield
    except Exception as exc:
        reason = f"agent {agent} crashed: {type(exc).__name__}: {exc}"
        health.fail(reason)
        log.critical("%s; exiting (code %d) so the control plane is restarted and reads the "
                     "record again", reason, FatalError.exit_code)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(FatalError.exit_code)


def _stop_failed(health: ControlHealth, reason: str) -> None:
    """A producer failed fatally outside an agent: the probes fail at once (with the reason)
    and the process stops, then exits non-zero (``run_control_app``)."""
    if health.fail(reason):
        log.critical("%s; stopping the control plane (it exits non-zero to be restarted)",
                     reason)
        request_stop()


def run_control_app(cfg: ControlAppConfig, hooks: ControlHooks) -> None:
    """Create the topics, run the app in the foreground until SIGTERM/SIGINT."""
    faust_broker_settings(cfg.conn)  # a bad security setting fails here, before any topic
    if cfg.rebuild_table:
        recovery.reset_changelogs(cfg.conn, changelogs(cfg))
    ensure_topics(cfg.conn, topic_specs(cfg), replication_factor=cfg.replication_factor)
    health = ControlHealth(liveness_s=cfg.liveness_s)
    server = None
    if cfg.http_port is not None:
        try:
            server = HealthServer(host=cfg.http_host, port=cfg.http_port, health=health).start()
        except OSError as exc:
            raise ConfigError(f"port {cfg.http_port} on {cfg.http_host} for the control plane's "
                              f"probes: {exc.strerror or exc}; HEADRACE_CONTROL_HTTP_PORT moves "
                              "it (0: any free port)") from None
    if server is not None:
        log.info("control-plane probes on port %d (/livez, /readyz)", server.port)
    watch = recovery.watch_for(cfg.conn, changelogs(cfg), deadline_s=cfg.recovery_deadline_s,
                               on_stuck=lambda line: request_stop())
    app = build_app(cfg, hooks, health)
    # faust starts timers only after recovery: the watch has its own thread.
    watch.start(lambda: health.recovered)
    worker = Worker(app, loglevel="warning", quiet=True, override_logging=False,
                    redirect_stdouts=False)
    try:
        with contextlib.suppress(SystemExit):
            worker.execute_from_commandline()
    finally:
        if server is not None:
            server.stop()
    if watch.stuck_line is not None:
        raise recovery.RecoveryStuck(watch.stuck_line)
    if health.fatal is not None:
        raise FatalError(f"the control plane stopped: {health.fatal}")


def request_stop() -> None:
    """Ask the worker in this process to shut down (as SIGTERM does)."""
    os.kill(os.getpid(), signal.SIGTERM)
