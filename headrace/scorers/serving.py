"""Run a scorer: embeddable (``run(settings, scorer_settings, stop_event)``) or from a CLI.

Start order: probes up (live, not ready) -> topics ensured -> first model resolved, verified and
warmed -> consumer joins -> ready once partitions are assigned -> loop. Stop order (SIGTERM):
stop polling -> finish the batch and commit -> close the consumer (leave the group) -> exit.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType

from headrace.core import heap
from headrace.core.errors import ConfigError
from headrace.core.off_main import run_off_main
from headrace.core.settings import Settings
from headrace.scorers.adapters import precision, select_runtime
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import ModelHolder, Sizing
from headrace.scorers.engine.probing import ProbeServer, ProbeState
from headrace.scorers.engine.roles import build as build_roles
from headrace.scorers.engine.settings import ScorerSettings
from headrace.scorers.engine.stall import GroupStandstill, LagWatch
from headrace.scorers.engine.stream_io import ModelEventsListener, StreamIO
from headrace.scorers.engine.swapping import ModelWatcher
from headrace.scorers.engine.taps import TapContext
from headrace.scorers.engine.taps import build as build_taps
from headrace.scorers.engine.topic_keeper import TopicKeeper
from headrace.scorers.engine.worker import Worker
from headrace.scorers.role_registry import ROLES
from headrace.scorers.tap_registry import TAPS
from headrace.scorers.wire.budget import MessageCaps
from headrace.scorers.wire.decode_pool import DecodePool
from headrace.scorers.wire.inputs import InputLimits
from headrace.streams import topics
from headrace.streams.client_errors import is_missing_topic
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.connection import connection_for
from headrace.streams.consuming import BatchConsumer
from headrace.streams.group_lag import GroupLag

log = logging.getLogger(__name__)


class Scorer:
    """One scorer process's parts. ``run`` blocks until ``stop`` is set (or a fatal error)."""

    def __init__(self, settings: Settings, scorer: ScorerSettings, *,
                 conn: KafkaConnection | None = None) -> None:
        if conn is None and not settings.bootstrap:
            raise ConfigError("the scorer needs Kafka: set HEADRACE_BOOTSTRAP or --bootstrap")
        select_runtime(scorer.runtime)  # before any model (and so Keras) is imported
        precision.select(scorer.precision)
        self.settings = settings
        self.scorer = scorer
        self.conn = conn or connection_for(settings)
        self.metrics = ScorerMetrics(stream=scorer.stream, model=scorer.model_name)
        self.holder = ModelHolder()
        self.metrics.precision_agreement.labels(model=scorer.model_name).set_function(
            lambda: precision.AGREEMENT.share(self.holder.current.ref)
            if self.holder.current is not None else float("nan"))
        self.state = ProbeState(liveness_s=scorer.liveness_s, stall_s=scorer.stall_s,
                                metrics=self.metrics)
        self.probes_up = threading.Event()
        self.http_port = 0
        self.worker: Worker | None = None

    def _first_load_phase(self, phase: str) -> None:
        """Until the first model serves, readiness says what the model watcher is doing."""
        if self.holder.current is None:
            self.state.phase = phase

    def transactional_id(self) -> str:
        if self.scorer.transactional_id:
            return self.scorer.transactional_id
        group = topics.scorer_group(self.scorer.stream)
        if self.scorer.partitions:
            return f"{group}.p{'-'.join(map(str, self.scorer.partitions))}"
        return f"{group}.{socket.gethostname()}.{os.getpid()}"

    def run(self, stop: threading.Event) -> None:
        """Score until ``stop`` is set, on a thread of its own: the main thread stays free for
        the signal handlers whatever native call the scoring loop is in (D46)."""
        run_off_main(lambda: self._serve(stop), name="scorer")

    def _serve(self, stop: threading.Event) -> None:
        s = self.scorer
        probes = ProbeServer(host=s.http_host, port=s.http_port, state=self.state,
                             metrics=self.metrics).start()
        self.http_port = probes.port
        self.probes_up.set()
        io: StreamIO | None = None
        lag_watch: LagWatch | None = None
        group_lag: GroupLag | None = None
        watcher: ModelWatcher | None = None
        decoders: DecodePool | None = None
        try:
            data = topics.data_topic(s.stream)
            model_events = topics.ControlTopics.of(self.settings).models  # HEADRACE_TOPIC_PREFIX
            keeper = TopicKeeper(self.conn, scorer_topics(self.settings, s.stream),
                                 replication_factor=self.settings.replication_factor)
            ensure_topics(self.conn, keeper.specs,
                          replication_factor=self.settings.replication_factor)
            watcher = ModelWatcher(
                root=self.settings.dfs_root, name=s.model_name, alias=s.alias, device=s.device,
                max_batch=s.batch_size, holder=self.holder, metrics=self.metrics,
                sizes=Sizing(max_batch_bytes=s.max_batch_bytes,
                             device_memory_mb=s.device_memory_mb),
                events=ModelEventsListener(self.conn, model_events), poll_s=s.model_poll_s,
                on_phase=self._first_load_phase)
            self.state.model_ready = lambda: self.holder.current is not None
            self.state.model_ref = lambda: (self.holder.current.ref
                                            if self.holder.current else None)
            if watcher.wait_first(stop) is None:
                return
            self.state.phase = "starting the consumer (rollout state, candidates, group)"
            watcher.start(stop)
            worker_box: list[Worker] = []

            def assignment_changed(_: list[tuple[str, int]]) -> None:
                if worker_box:
                    worker_box[0].batcher.assignment_changed.set()

            def revoked(tps: list[tuple[str, int]]) -> None:
                if worker_box:
                    worker_box[0].on_revoked(tps)

            context = TapContext(self.settings, s, self.conn, self.metrics, stop)
            # A canary's candidate is loaded before the first batch.
            routes = build_roles(context, ROLES)
            heap.rarer_young_collections(s.batch_size)
            if s.decode_processes:
                try:
                    decoders = DecodePool(s.decode_processes).start()
                except OSError as exc:  # decode in the scoring thread instead
                    log.warning("cannot start decode helpers: %s", exc)
            io = StreamIO(
                self.conn,
                BatchConsumer(self.conn, group_id=topics.scorer_group(s.stream), topics=[data],
                              partitions=s.partitions, on_assign=assignment_changed,
                              on_revoke=revoked, on_error=lambda err: (
                                  keeper.check(err.str()) if is_missing_topic(err) else None)),
                transactional_id=self.transactional_id() if s.transactional else None,
                idempotent=s.idempotent,
                producer_overrides={"message.max.bytes": s.message_max_bytes},
            )
            worker = Worker(
                io=io, holder=self.holder, metrics=self.metrics,
                predictions_topic=topics.predictions_topic(s.stream),
                dlq_topic=topics.dlq_topic(s.stream), batch_size=s.batch_size,
                max_wait_s=s.max_wait_ms / 1000.0, grace_s=s.grace_s,
                transactional=s.transactional, stop=stop, decoders=decoders,
                limits=InputLimits(max_image_pixels=s.max_image_pixels,
                                   max_arrow_bytes=s.max_arrow_bytes,
                                   message=MessageCaps(max_rows=s.max_message_rows,
                                                       max_bytes=s.max_message_bytes)),
                top_k=s.top_k, max_batch_bytes=s.max_batch_bytes,
                taps=build_taps(context, TAPS), routes=routes, on_retry=keeper.check)
            worker_box.append(worker)
            self.worker = worker
            self.state.assigned = lambda: len(io.assignment()) if io is not None else 0
            self.state.last_progress = lambda: worker.last_progress
            self.state.last_consumed = lambda: worker.last_consumed
            self.state.last_retry = lambda: worker.last_retry
            group_lag = GroupLag(self.conn, topics.scorer_group(s.stream),
                                 on_unanswered=self.metrics.lag_unanswered.inc)
            positions = io.positions_seen
            standstill = GroupStandstill(lambda: group_lag.topic_view(data),
                                         lambda: len(io.assignment()) if io is not None else 0)
            lag_watch = LagWatch(lambda: group_lag(positions()), every_s=s.lag_check_s,
                                 also=standstill.refresh).start()
            self.state.lag = lag_watch.snapshot
            self.state.group_standstill = standstill.standstill
            self.state.start()
            log.info("scoring %s with %s", data, self.holder.current.ref if self.holder.current
                     else "?")
            worker.run()
        finally:
            self.state.stopping = True
            self.state.phase = "stopping"
            stopped_at = time.monotonic()
            if lag_watch is not None:
                lag_watch.stop()  # before the consumer it reads closes
            if group_lag is not None:
                group_lag.close()
            if decoders is not None:
                decoders.close()
            if io is not None:
                io.close(timeout_s=max(0.5, s.grace_s * 0.5))
            if watcher is not None:
                watcher.join(timeout_s=2.0)
            probes.stop()
            log.info("scorer stopped in %.2fs", time.monotonic() - stopped_at)


def scorer_topics(settings: Settings, stream: str) -> list[topics.TopicSpec]:
    """The topics a scorer of ``stream`` creates when missing, with the durability settings
    (``min.insync.replicas``) every topic creator applies."""
    control = topics.ControlTopics.of(settings)  # under HEADRACE_TOPIC_PREFIX
    wanted = (topics.data_topic(stream), topics.predictions_topic(stream),
              topics.dlq_topic(stream), control.models, control.rollout, control.rollout_live,
              control.drift, control.drift_state, control.lineage,
              control.jobs)  # jobs: a canary's audit events
    return [dataclasses.replace(spec, config={**spec.config, **settings.topic_config()})
            for spec in topics.catalog(settings.with_overrides(streams=[stream]))
            if spec.name in wanted]


def run(settings: Settings, scorer_settings: ScorerSettings, stop_event: threading.Event, *,
        conn: KafkaConnection | None = None) -> None:
    """Score until ``stop_event`` is set; raise ``FatalError`` (exit code) on what cannot go on."""
    Scorer(settings, scorer_settings, conn=conn).run(stop_event)


def install_signal_handlers(stop: threading.Event, *, grace_s: float) -> None:
    """SIGTERM/SIGINT set ``stop``; a watchdog exits the process if it outlives ``grace_s``.
    A fatal signal (a native library's abort or crash) prints every thread's stack first, so
    a scorer never dies with nothing in its log (D41); SIGUSR2 prints them and goes on (where
    is a scorer that does nothing stuck?)."""
    # The process's own stderr: sys.stderr may be a stream with no descriptor (a caller's
    # capture), and faulthandler writes to a descriptor.
    err = sys.__stderr__
    if err is not None:
        faulthandler.enable(file=err, all_threads=True)
        faulthandler.register(signal.SIGUSR2, file=err, all_threads=True)

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            return
        log.info("signal %d: finishing the batch, committing, exiting", signum)
        stop.set()
        t = threading.Timer(grace_s, _overdue, args=(grace_s,))
        t.daemon = True
        t.start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)


def _overdue(grace_s: float) -> None:
    print(f"headrace: scorer did not stop within {grace_s:.0f}s; exiting; where each thread "
          "was:", file=sys.stderr, flush=True)
    if sys.__stderr__ is not None:  # why it hung, for the log
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
    os._exit(3)
