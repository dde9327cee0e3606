"""``headrace control``: the control plane and the local executor in one foreground process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from headrace.core.errors import RecordRef
from headrace.streams.clients import KafkaConnection
from headrace.streams.control_app import ControlAppConfig, ControlHooks, run_control_app
from headrace.streams.topics import ControlTopics
from headrace.trainers.control.plane import ControlPlane, Table, utcnow
from headrace.trainers.control.triggers import Triggers
from headrace.trainers.executors.local import LocalExecutor
from headrace.trainers.limits import RequestCaps


def run_control(
    *, root: Path, conn: KafkaConnection, topics: ControlTopics = ControlTopics(),
    triggers: Triggers = Triggers(), app_id: str = "headrace-control",
    concurrency: dict[str, int] | None = None, timeout_s: float = 3600.0,
    max_attempts: int = 3, backoff_s: float = 1.0, now: Callable[[], datetime] = utcnow,
    tick_s: float = 0.25, caps: RequestCaps | None = None,
) -> None:
    """Run until SIGTERM/SIGINT; running jobs are stopped and resume on the next start."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("faust", "mode", "aiokafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    executor = LocalExecutor(root=root, bootstrap=conn.bootstrap, topic_prefix=topics.prefix,
                             concurrency=concurrency or {"tensorflow": 1, "mxnet": 1},
                             timeout_s=timeout_s, max_attempts=max_attempts,
                             backoff_s=backoff_s)
    plane = ControlPlane(root=root, conn=conn, executor=executor, topics=topics,
                         triggers=triggers, now=now, caps=caps or RequestCaps())
    executor.on_retry = plane.on_retry
    executor.on_start = plane.on_start
    streams = tuple(sorted({r.stream for r in triggers.rules}))

    def on_request(record: RecordRef, table: Table) -> None:
        plane.on_request(record, table)

    hooks = ControlHooks(
        on_request=on_request,
        on_tick=plane.on_tick,
        on_schedules=plane.on_schedules if triggers.schedules else None,
        on_data=plane.on_data if triggers.rules else None,
        on_ready=plane.on_ready,
        on_stop=plane.close,
    )
    run_control_app(ControlAppConfig(conn=conn, topics=topics, app_id=app_id,
                                     data_streams=streams, tick_s=tick_s), hooks)
