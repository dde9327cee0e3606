"""``headrace control``: the control plane with its executor, in one foreground process.

The executor is chosen by ``HEADRACE_EXECUTOR`` (:class:`ControlSettings`): ``local`` runs jobs
as subprocesses; ``kubernetes`` creates one Job per training job and never trains here. The
Kubernetes API is connected before anything else (:func:`prepare_executor`), so a missing
configuration stops the process at start with one line, never a fallback to local training.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from headrace.core.errors import ConfigError, RecordRef
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers.control.app import run_control_app
from headrace.trainers.control.app_config import ControlAppConfig, ControlHooks
from headrace.trainers.control.drift_rule import DriftRule
from headrace.trainers.control.plane import ControlPlane, Table, utcnow
from headrace.trainers.control.rebuild import reconcile
from headrace.trainers.control.settings import ControlSettings
from headrace.trainers.control.triggers import EventRule, Triggers
from headrace.trainers.executors.base import Executor
from headrace.trainers.executors.local import LocalExecutor
from headrace.trainers.limits import RequestCaps


@dataclass(frozen=True)
class ExecutorChoice:
    """What :func:`prepare_executor` resolved: the settings and, for Kubernetes, the APIs."""

    control: ControlSettings
    kube: Any = None  # headrace.trainers.executors.kubernetes.KubeApis


def prepare_executor(control: ControlSettings, *, kube: Any = None) -> ExecutorChoice:
    """Connect to the Kubernetes API when the executor is ``kubernetes`` (``ConfigError`` if
    there is no configuration). ``kube`` injects API objects (tests: a recording fake)."""
    if control.executor != "kubernetes":
        return ExecutorChoice(control)
    if kube is None:
        from headrace.trainers.executors.kubernetes import kube_apis

        kube = kube_apis()
    return ExecutorChoice(control, kube)


def build_executor(
    choice: ExecutorChoice, *, root: Path, conn: KafkaConnection, topics: ControlTopics,
    on_event: Callable[..., None], concurrency: dict[str, int], timeout_s: float,
    max_attempts: int, backoff_s: float, kafka_password_file: Path | None = None,
) -> Executor:
    control = choice.control
    if control.executor == "local":
        return LocalExecutor(root=root, bootstrap=conn.bootstrap, topic_prefix=topics.prefix,
                             concurrency=concurrency, timeout_s=timeout_s,
                             max_attempts=max_attempts, backoff_s=backoff_s,
                             watchdog_s=control.control_watchdog_s,
                             startup_s=control.control_startup_s)
    from headrace.trainers.executors.kubernetes import (
        KubernetesExecutor,
        KubernetesExecutorConfig,
        jobset_installed,
    )

    if choice.kube is None:
        raise ConfigError("the Kubernetes executor was not prepared (no API connection)")
    image = control.k8s_image or ""
    config = KubernetesExecutorConfig(
        image=image, gpu_image=control.k8s_gpu_image, namespace=control.k8s_namespace,
        dfs_claim=control.k8s_dfs_claim,
        dfs_root=str(root), kafka_secret=control.k8s_kafka_secret,
        kafka_password_file=str(kafka_password_file) if kafka_password_file else None,
        kafka_ca_secret=control.k8s_kafka_ca_secret,
        kafka_client_cert_secret=control.k8s_kafka_client_cert_secret,
        service_account=control.k8s_service_account, gang=control.k8s_gang,
        queue=control.k8s_queue, gpu_type=control.k8s_gpu_type,
        max_retries=control.k8s_max_retries,
        # The job timeout bounds every Job (activeDeadlineSeconds): a hung or never-admitted
        # gang lets go of its pods and GPUs.
        active_deadline_s=max(1, int(timeout_s)),
        jobset=jobset_installed(replace(choice.kube, namespace=control.k8s_namespace)),
        watchdog_s=control.control_watchdog_s, startup_s=control.control_startup_s,
        trainer_env=tuple(sorted(control.k8s_trainer_env.items())))
    executor = KubernetesExecutor(config=config, batch_api=choice.kube.batch,
                                  core_api=choice.kube.core, custom_api=choice.kube.custom,
                                  networking_api=choice.kube.networking,
                                  on_event=on_event)
    executor.start()  # API calls on the executor's own thread, never on the event loop
    return executor


def build_control_plane(
    choice: ExecutorChoice, *, root: Path, conn: KafkaConnection,
    topics: ControlTopics = ControlTopics(), triggers: Triggers = Triggers(),
    concurrency: dict[str, int] | None = None, timeout_s: float = 3600.0,
    max_attempts: int = 3, backoff_s: float = 1.0, now: Callable[[], datetime] = utcnow,
    kafka_password_file: Path | None = None, caps: RequestCaps | None = None,
) -> ControlPlane:
    """The control plane with its executor wired both ways (events flow back to it)."""
    planes: list[ControlPlane] = []

    def on_event(kind: str, message: str, **fields: Any) -> None:
        if planes:
            planes[0].on_executor_event(kind, message, **fields)

    executor = build_executor(
        choice, root=root, conn=conn, topics=topics, on_event=on_event,
        concurrency=concurrency or {"tensorflow": 1, "mxnet": 1}, timeout_s=timeout_s,
        max_attempts=max_attempts, backoff_s=backoff_s, kafka_password_file=kafka_password_file)
    plane = ControlPlane(root=root, conn=conn, executor=executor, topics=topics,
                         triggers=triggers, now=now, caps=caps or RequestCaps())
    planes.append(plane)
    if isinstance(executor, LocalExecutor):
        executor.on_retry = plane.on_retry
        executor.on_start = plane.on_start
    return plane


def run_control(
    *, root: Path, conn: KafkaConnection, topics: ControlTopics = ControlTopics(),
    triggers: Triggers = Triggers(), app_id: str = "headrace-control",
    concurrency: dict[str, int] | None = None, timeout_s: float = 3600.0,
    max_attempts: int = 3, backoff_s: float = 1.0, now: Callable[[], datetime] = utcnow,
    tick_s: float = 0.25, caps: RequestCaps | None = None,
    choice: ExecutorChoice | None = None, kafka_password_file: Path | None = None,
    replication_factor: int = 1, topic_config: dict[str, str] | None = None,
) -> None:
    """Run until SIGTERM/SIGINT; running jobs are stopped and resume on the next start."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("faust", "mode", "aiokafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Embedded use (tests, the demo stack): local executor, probes on any free port.
    choice = choice or ExecutorChoice(ControlSettings(executor="local", control_http_port=0))
    plane = build_control_plane(
        choice, root=root, conn=conn, topics=topics, triggers=triggers,
        concurrency=concurrency, timeout_s=timeout_s, max_attempts=max_attempts,
        backoff_s=backoff_s, now=now, kafka_password_file=kafka_password_file, caps=caps)
    counted = triggers.of_kind(EventRule)
    streams = tuple(sorted({r.stream for r in counted}))

    def on_request(record: RecordRef, table: Table) -> None:
        plane.on_request(record, table)

    control = choice.control

    def on_ready(table: Table) -> None:
        # Rows the table lost (broker data gone, a producer dead mid-request) come back from
        # the DFS before anything is resumed: a consumed request is never lost.
        reconcile(root, table, full=control.control_rebuild_table)
        plane.on_ready(table)

    hooks = ControlHooks(
        on_request=on_request,
        on_tick=plane.on_tick,
        on_schedules=plane.on_schedules if triggers.schedules else None,
        on_data=plane.on_data if counted else None,
        on_drift=plane.on_drift if triggers.of_kind(DriftRule) else None,
        on_ready=on_ready,
        on_stop=plane.close,
        on_request_failed=plane.on_request_failed,
    )
    run_control_app(ControlAppConfig(
        conn=conn, topics=topics, app_id=app_id, data_streams=streams, tick_s=tick_s,
        replication_factor=replication_factor, topic_config=dict(topic_config or {}),
        http_host=control.control_http_host, http_port=control.control_http_port,
        liveness_s=control.control_liveness_s, rebuild_table=control.control_rebuild_table,
        recovery_deadline_s=control.control_recovery_deadline_s), hooks)
