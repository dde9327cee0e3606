"""What the control-plane app is given (its settings and the callbacks into the plane's logic)
and the topics it uses; faust-free, so the plane's service and the tests name them without
importing faust.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headrace.core.errors import HeadraceError, RecordRef
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics, TopicSpec
from headrace.trainers.control.plane import Table


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
    # Each events.drift record, with the drift-episodes table (keyed by rule name).
    on_drift: Callable[[RecordRef, Table], object] | None = None
    # Once, after the tables are recovered: resubmit jobs that were queued or running.
    on_ready: Callable[[Table], None] | None = None
    on_stop: Callable[[], None] | None = None
    # A request that was dead-lettered (not a parse error): report it on its job.
    on_request_failed: Callable[[RecordRef, HeadraceError], None] | None = None


@dataclass(frozen=True)
class ControlAppConfig:
    conn: KafkaConnection
    topics: ControlTopics = field(default_factory=ControlTopics)
    app_id: str = "headrace-control"
    data_streams: tuple[str, ...] = ()
    tick_s: float = 0.25
    datadir: Path | None = None
    replication_factor: int = 1
    topic_config: dict[str, str] = field(default_factory=dict)  # e.g. min.insync.replicas
    http_host: str = "0.0.0.0"
    http_port: int | None = None  # /livez and /readyz; None: no server
    liveness_s: float = 60.0
    route_attempts: int = 4  # a retriable error is retried this often, then dead-lettered
    route_backoff_s: float = 0.5
    recovery_deadline_s: float = 120.0  # then a recovery that cannot end is said (recovery.py)
    rebuild_table: bool = False  # reset the tables' changelogs at start (rebuilt from the DFS)

    @property
    def full_app_id(self) -> str:
        return f"{self.topics.prefix}-{self.app_id}" if self.topics.prefix else self.app_id


# faust names their changelogs <app id>-<table>-changelog
TABLES = ("jobs", "rule-counters", "drift-episodes")


def topic_specs(cfg: ControlAppConfig) -> list[TopicSpec]:
    """Every topic the app uses, created up front with the configured durability (faust would
    create its changelogs itself, without min.insync.replicas)."""
    compact = {"cleanup.policy": "compact"}
    specs = cfg.topics.specs(data_streams=cfg.data_streams)
    specs += [TopicSpec(f"{cfg.full_app_id}-{t}-changelog", 1, f"faust table {t}", compact)
              for t in TABLES]
    specs.append(TopicSpec(f"{cfg.full_app_id}-__assignor-__leader", 1, "faust leader"))
    return [dataclasses.replace(s, config={**s.config, **cfg.topic_config}) for s in specs]


def changelogs(cfg: ControlAppConfig) -> list[str]:
    """Every topic a table recovers from (the schedules table's is events.schedules)."""
    return [f"{cfg.full_app_id}-{t}-changelog" for t in TABLES] + [cfg.topics.schedules]
