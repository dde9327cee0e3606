"""The Kubernetes executor: each training job becomes a Job (or a gang: a JobSet, or one
indexed Job per role).

It implements :class:`headrace.trainers.executors.base.Executor` and ``Adopting``. Once
:meth:`KubernetesExecutor.start` ran (the control plane does), every API call happens on the
executor's own thread: ``submit`` queues, the thread creates the objects from
:mod:`kubernetes_objects` (a second submit of the same job id finds them and is a no-op; 5xx
and 429 are retried with backoff), follows every trainer Job through one list + watch
(:mod:`kubernetes_watch`), mirrors transitions through ``on_event(kind, message, **fields)``
(the control plane forwards them to ``events.jobs``), reads pod logs only when a job fails,
restarts a failed or hung gang as its next attempt, and ``poll`` hands over the jobs that ended.

The API objects are injected (``BatchV1Api``, ``CoreV1Api``, ``CustomObjectsApi`` or fakes), so
this module needs no cluster to test; :func:`from_kube_config` builds the real ones. Beside it:
:mod:`kubernetes_api` (reaching the API, every call's retries), :mod:`kubernetes_attempts` (an
attempt's objects created, found and deleted), :mod:`kubernetes_status` (an attempt's state
read from its Jobs and pods) and :mod:`kubernetes_logs` (its pods' logs sent once each).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from headrace.core.errors import HeadraceError, RetriableError
from headrace.core.types import trained_framework
from headrace.trainers.distributed.heartbeat import verdict
from headrace.trainers.executors import kubernetes_kueue as kueue
from headrace.trainers.executors.base import PERMANENT_EXIT_CODES, JobOutcome, JobSpec
from headrace.trainers.executors.kubernetes_api import (
    ApiCalls,
    KubeApis,
    jobset_installed,
    kube_apis,
    load_kube_config,
    networking,
    one_line,
)
from headrace.trainers.executors.kubernetes_attempts import AttemptObjects
from headrace.trainers.executors.kubernetes_logs import PodLogs
from headrace.trainers.executors.kubernetes_objects import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    ClusterPlacement,
    TrainingJobSpec,
)
from headrace.trainers.executors.kubernetes_status import (
    NOT_YET,
    Status,
    disrupted,
    ending,
    exit_code,
    gang_status,
    jobset_status,
    running,
    selector,
    unscheduled,
)
from headrace.trainers.executors.kubernetes_watch import JobWatch

log = logging.getLogger(__name__)


class OnEvent(Protocol):
    def __call__(self, kind: str, message: str, **fields: Any) -> None: ...


@dataclass(frozen=True, kw_only=True)
class KubernetesExecutorConfig(ClusterPlacement):
    """Cluster-side settings shared by every job (the rest comes from each JobSpec)."""

    gpu_type: str | None = None
    log_window_s: int = 60
    # No training step (heartbeat on the DFS at dfs_root) for this long: the attempt is hung
    # and restarted from its last checkpoint. None: no watchdog.
    watchdog_s: float | None = None
    # No first training step this long after the pods run: the same (None: off).
    startup_s: float | None = None
    trainer_env: tuple[tuple[str, str], ...] = ()  # extra env of every trainer pod


def job_spec_for(job: JobSpec, config: KubernetesExecutorConfig) -> TrainingJobSpec:
    r = job.resources
    return TrainingJobSpec(
        **config.placement(),
        job_id=job.job_id, model_name=job.model_name, framework=trained_framework(job.framework),
        workers=r.workers, servers=r.servers,
        strategy=job.strategy,  # type: ignore[arg-type]
        gpus_per_worker=r.gpus, gpu_type=config.gpu_type if r.gpus else None,
        cpu=f"{int(r.cpu * 1000)}m", memory=f"{int(r.memory_gib * 1024)}Mi",
        server_cpu=f"{int(r.server_cpu * 1000)}m",
        server_memory=f"{int(r.server_memory_gib * 1024)}Mi", server_gpus=r.server_gpus,
        extra_env=config.trainer_env,
    )


@dataclass
class _Tracked:
    spec: TrainingJobSpec
    state: str = "creating"  # creating -> queued -> running
    failed: int = 0
    restarts: int = 0  # gang restarts (a new Job per attempt)
    tried: bool = False  # a create was sent: a later 409 is our own Job, not a duplicate
    seen: set[str] = field(default_factory=set)  # Jobs the watch has shown (gone = deleted)
    running_since: float = 0.0  # wall time the attempt's pods were first seen running
    waiting: str | None = None  # the scheduler's last reason for a Pending pod, as reported
    waiting_checked: float = 0.0  # monotonic time the pods were last read for it
    last_log: dict[str, str] = field(default_factory=dict)  # pod -> last timestamp mirrored


class KubernetesExecutor:
    """Kubernetes API calls never run on the caller's thread once :meth:`start` ran: ``submit``
    queues, a supervisor thread creates the objects (retrying 5xx/429 with backoff; 409 is
    "already created") and follows the Jobs through one watch, and ``poll`` hands over what
    ended. Without :meth:`start` (tests), ``submit`` and ``poll`` run one supervision pass
    inline."""

    def __init__(
        self,
        *,
        config: KubernetesExecutorConfig,
        batch_api: Any,
        core_api: Any,
        custom_api: Any,
        on_event: OnEvent | Callable[..., None],
        networking_api: Any = None,
        request_timeout_s: float = 10.0,
        watch_s: float = 2.0,
        backoff_s: float = 0.5,
        api_tries: int = 4,
        waiting_check_s: float = 5.0,
    ) -> None:
        self._config = config
        self._batch = batch_api
        self._core = core_api
        self._custom = custom_api
        # NetworkingV1Api (gang NetworkPolicies); by default on the core API's client.
        self._net = networking_api if networking_api is not None else networking(core_api)
        self._on_event = on_event
        self._timeout = request_timeout_s
        self._watch_s = watch_s
        self._backoff_s = backoff_s
        # A Job whose pods are not all running: its pods are read this often for the
        # scheduler's reason (only then; a running job costs no pod reads).
        self._waiting_check_s = waiting_check_s
        self._jobs: dict[str, _Tracked] = {}
        self._pending: list[str] = []  # job ids whose objects are still to be created
        self._outcomes: list[JobOutcome] = []
        self._lock = threading.RLock()
        self._watch = JobWatch(batch_api, config.namespace, request_timeout_s=request_timeout_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._api = ApiCalls(max(1, api_tries), backoff_s, self._stop)
        self._logs = PodLogs(self._api, core=core_api, timeout_s=request_timeout_s,
                             window_s=config.log_window_s)
        self._objects = AttemptObjects(self._api, batch=batch_api, core=core_api,
                                       custom=custom_api, net=self._net,
                                       timeout_s=request_timeout_s)
        self._thread: threading.Thread | None = None

    # -- Executor protocol -------------------------------------------------------------

    def submit(self, job: JobSpec) -> None:
        spec = job_spec_for(job, self._config)  # a bad spec is refused here, at once
        with self._lock:
            if job.job_id in self._jobs:
                return
            self._jobs[job.job_id] = _Tracked(spec)
            self._pending.append(job.job_id)
        self._wake.set()
        if self._thread is None:
            self.step()

    def submit_spec(self, spec: TrainingJobSpec) -> bool:
        """Create the job's objects now; False when the Job already existed (idempotent)."""
        with self._lock:
            self._jobs[spec.job_id] = _Tracked(spec, state="queued", tried=True)
        return self._objects.create(spec)

    def poll(self) -> list[JobOutcome]:
        if self._thread is None:
            self.step()
        with self._lock:
            ended, self._outcomes = self._outcomes, []
        return ended

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            tracked = self._jobs.pop(job_id, None)
            if job_id in self._pending:
                self._pending.remove(job_id)
        if tracked is None:
            return False
        spec = tracked.spec
        if tracked.tried:
            self._objects.delete(spec, "Foreground")
        self._emit("failed", spec, "cancelled", reason="cancelled")
        return True

    def active(self) -> list[str]:
        with self._lock:
            return sorted(self._jobs)

    def close(self) -> None:
        # Jobs outlive the control plane on purpose: a restarted control plane adopts them.
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout + self._watch_s + 5)
            self._thread = None
        with self._lock:
            self._jobs.clear()

    # -- adoption (see base.Adopting) ------------------------------------------------------

    def handle(self, job_id: str) -> dict[str, Any] | None:
        """The attempt's owner (Job or JobSet) name and attempt number."""
        with self._lock:
            t = self._jobs.get(job_id)
        if t is None or not t.tried:
            return None
        return {"kind": "kubernetes", "name": t.spec.job_name, "attempt": t.spec.attempt,
                "restarts": t.restarts}

    def adopt(self, job: JobSpec, handle: Mapping[str, Any]) -> bool:
        """Follow the recorded attempt instead of creating attempt 1 beside it; the
        supervisor checks it still exists (if not, it starts the next attempt)."""
        if handle.get("kind") != "kubernetes":
            return False
        spec = replace(job_spec_for(job, self._config), attempt=int(handle.get("attempt", 1)))
        with self._lock:
            if job.job_id in self._jobs:
                return True
            self._jobs[job.job_id] = _Tracked(spec, state="adopting", tried=True,
                                              restarts=int(handle.get("restarts", 0)))
            self._pending.append(job.job_id)
        self._wake.set()
        if self._thread is None:
            self.step()
        return True

    def reap(self, job_id: str, handle: Mapping[str, Any]) -> None:
        # Every handle this executor writes is adoptable; another executor's is not ours.
        return None

    # -- the supervisor ----------------------------------------------------------------

    def start(self) -> None:
        """Run supervision on a thread of its own from now on (the control plane does)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kubernetes-executor",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # the API is down or refuses: keep supervising
                log.warning("kubernetes executor: %s", one_line(exc))
                self._stop.wait(self._backoff_s)
            with self._lock:
                idle = not self._jobs
            if idle:
                self._wake.wait(self._watch_s)
                self._wake.clear()

    def step(self) -> None:
        """One supervision pass: create what is pending, follow the Jobs, settle the ended."""
        self._create_pending()
        with self._lock:
            followed = [t for t in self._jobs.values() if t.state != "creating"]
        if not followed:
            return
        self._watch.follow(self._watch_s if self._thread is not None else 0)
        for t in followed:
            with self._lock:
                if self._jobs.get(t.spec.job_id) is not t:
                    continue  # cancelled meanwhile
            outcome = self._poll_one(t)
            if outcome is not None:
                with self._lock:
                    self._jobs.pop(t.spec.job_id, None)
                    self._outcomes.append(outcome)

    def _create_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for job_id in pending:
            with self._lock:
                t = self._jobs.get(job_id)
            if t is None:
                continue
            if t.state == "adopting":
                self._settle_adopted(t)
                continue
            already = t.tried
            t.tried = True
            try:
                created = self._objects.create(t.spec) or already
            except RetriableError as exc:  # the job waits; it is not failed by the API
                log.warning("job %s: creating its objects failed, will retry: %s", job_id, exc)
                with self._lock:
                    self._pending.append(job_id)
                continue
            except HeadraceError as exc:
                why = str(exc)
                self._emit("failed", t.spec, why, reason=why)
                with self._lock:
                    self._jobs.pop(job_id, None)
                    self._outcomes.append(JobOutcome(job_id, False, None, 1, why))
                continue
            t.state = "queued"
            spec = t.spec
            self._emit("queued" if created else "duplicate", spec,
                       f"kubernetes job {spec.name} {'created' if created else 'already exists'}")

    def _settle_adopted(self, t: _Tracked) -> None:
        spec = t.spec
        try:
            exists = self._objects.owner_uid(spec, missing_ok=True) is not None
        except RetriableError:
            with self._lock:
                self._pending.append(spec.job_id)
            return
        if not exists:  # the attempt is gone (deleted while nobody watched): the next one
            t.spec = replace(spec, attempt=spec.attempt + 1)
            t.state = "creating"
            with self._lock:
                self._pending.append(spec.job_id)
            log.info("job %s: attempt %d is gone; starting attempt %d", spec.job_id,
                     spec.attempt, t.spec.attempt)
            return
        t.state = "queued"
        log.info("job %s: adopted %s (attempt %d)", spec.job_id, spec.job_name, spec.attempt)

    # -- status and logs ---------------------------------------------------------------

    def _poll_one(self, t: _Tracked) -> JobOutcome | None:
        spec = t.spec
        st = self._status(t)
        if st is NOT_YET:
            return None
        if st is None:
            self._emit("failed", spec, "kubernetes job disappeared", reason="deleted")
            return JobOutcome(spec.job_id, False, None, t.failed + 1, "kubernetes job deleted")
        failed = int(st.failed or 0) if st else 0
        # A gang has started when every member runs: until then its members cannot train
        # (they wait for each other), and the missing ones' reason is what to report.
        # (A JobSet reports no ready count: its first active pod stands in.)
        need = 1 if spec.uses_jobset else spec.pods
        if st is not None and t.state == "queued" and running(st) >= need:
            t.state = "running"
            t.running_since = time.time()
            self._emit("started", spec, f"{running(st)} of {spec.workers} worker(s) running"
                       f"{self._nodes(spec)}", attempt=failed + 1)
        elif st is not None and t.state == "queued" and int(st.active or 0) > running(st):
            self._report_waiting(t, attempt=failed + 1)
        elif st is not None and t.state == "queued" and spec.gang == "kueue":
            self._report_waiting(t, attempt=failed + 1, admission=True)
        if failed > t.failed:
            t.failed = failed
            # The failure that ends the Job is not a retry (the Job controller marks it
            # FailureTarget, then Failed; its pod count can arrive first).
            if failed <= spec.max_retries and not ending(st):
                self._emit("retrying", spec, f"worker failed ({failed} of "
                           f"{spec.max_retries + 1} attempts used); resuming from the last "
                           "checkpoint", attempt=failed + 1)
        why = (verdict(Path(spec.dfs_root), spec.job_id, since=t.running_since,
                       watchdog_s=self._config.watchdog_s, startup_s=self._config.startup_s)
               if t.state == "running" else None)
        if why is not None:
            log.warning("job %s: %s", spec.job_id, why)
            if self._restart_gang(t, hung=why):
                return None
            self._objects.delete(spec, "Background")
            self._emit("failed", spec, why, reason=why, attempt=t.spec.attempt)
            return JobOutcome(spec.job_id, False, None, t.spec.attempt, why)
        for cond in (st.conditions or []) if st else []:
            if cond.status != "True":
                continue
            if cond.type == "Complete":
                self._emit("succeeded", spec, "kubernetes job complete", attempt=failed + 1)
                return JobOutcome(spec.job_id, True, 0, failed + 1)
            if cond.type == "Failed" and self._restart_gang(t):
                return None
            if cond.type == "Failed":
                self._mirror_logs(t)  # logs are read on failure (or for `jobs logs`) only
                why = f"{cond.reason or 'Failed'}: {cond.message or ''}".strip(": ")
                self._emit("failed", spec, why, reason=why, attempt=max(failed, 1))
                return JobOutcome(spec.job_id, False, exit_code(self._pods(spec)), max(failed, 1),
                                  why)
        return None

    def _status(self, t: _Tracked) -> Any:
        """The attempt's status as one Job's (``active``, ``failed``, ``conditions``) from
        the watch; None when it is gone, ``NOT_YET`` before the watch has shown it. A gang
        completes when its workers do and fails when any role does."""
        spec = t.spec
        if spec.uses_jobset:
            got = self._api.call(lambda: self._custom.get_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, _request_timeout=self._timeout),
                missing_ok=True)
            if got is None:
                return None
            return jobset_status(got)
        statuses = []
        for name in spec.role_job_names:
            if not self._watch.known(name):
                return None if name in t.seen else NOT_YET
            t.seen.add(name)
            statuses.append(self._watch.status(name) or Status(0, 0, []))
        return gang_status(statuses)

    def _pods(self, spec: TrainingJobSpec) -> list[Any]:
        pods = self._api.call(lambda: self._core.list_namespaced_pod(
            spec.namespace, label_selector=selector(spec), _request_timeout=self._timeout),
            missing_ok=True)
        return list((pods.items if pods else None) or [])

    def _nodes(self, spec: TrainingJobSpec) -> str:
        """`` on NODE[, NODE]``: where the scheduler bound the attempt's running pods."""
        try:
            nodes = sorted({p.spec.node_name for p in self._pods(spec)
                            if p.spec and p.spec.node_name and p.status
                            and p.status.phase == "Running"})
        except HeadraceError:  # the start is reported all the same
            return ""
        return f" on {', '.join(nodes)}" if nodes else ""

    def _report_waiting(self, t: _Tracked, *, attempt: int, admission: bool = False) -> None:
        """A pod of the attempt the scheduler cannot place, or (``admission``) a job Kueue
        has not admitted: the reason, once per change."""
        now = time.monotonic()
        if t.waiting_checked and now - t.waiting_checked < self._waiting_check_s:
            return
        t.waiting_checked = now
        try:
            why = self._not_admitted(t.spec) if admission else unscheduled(self._pods(t.spec))
        except HeadraceError:
            return
        if why is not None and why != t.waiting:
            t.waiting = why
            what = "admission" if admission else "a node"
            self._emit("waiting", t.spec, f"waiting for {what}: {why}", reason=why,
                       attempt=attempt)

    def _not_admitted(self, spec: TrainingJobSpec) -> str | None:
        def list_call(version: str) -> Any:  # None where that version is not served
            return self._api.call(lambda: self._custom.list_namespaced_custom_object(
                group=kueue.KUEUE_GROUP, version=version, namespace=spec.namespace,
                plural="workloads", _request_timeout=self._timeout), missing_ok=True)

        # Kueue's Workload is owned by what it admits: the JobSet, else the (first role's) Job.
        owner = spec.job_name if spec.uses_jobset else spec.role_job_names[0]
        workloads = kueue.workloads_of(list_call, owner)
        return next(filter(None, map(kueue.admission_wait, workloads)), None)

    def logs(self, job_id: str) -> list[str]:
        """The job's pods' log lines now (``jobs logs``), tagged by gang member."""
        with self._lock:
            t = self._jobs.get(job_id)
        if t is None:
            return []
        lines: list[str] = []
        self._mirror_logs(t, sink=lines.append)
        return lines

    def _restart_gang(self, t: _Tracked, *, hung: str | None = None) -> bool:
        """A failed gang Job (not a permanent exit) -- or any hung attempt -- is recreated
        whole as the next attempt, within ``max_retries``; its workers resume from the last
        complete checkpoint."""
        spec = t.spec
        if spec.pods == 1 and not hung:
            return False
        if exit_code(self._pods(spec)) in PERMANENT_EXIT_CODES:
            return False
        preempted = disrupted(self._pods(spec))
        if t.restarts >= spec.max_retries and not preempted:
            return False
        self._objects.delete(spec, "Background")
        if not preempted:  # a preempted or evicted member is not the job's fault
            t.restarts += 1
        t.spec = replace(spec, attempt=spec.attempt + 1)
        t.state, t.seen = "queued", set()
        new = t.spec
        self._objects.create(new)
        what = hung or "gang member failed"
        self._emit("retrying", new, f"{what}: restarting all {new.pods} pods as "
                   f"{new.job_name} from the last checkpoint", attempt=new.attempt)
        return True

    def _mirror_logs(self, t: _Tracked, sink: Callable[[str], None] | None = None) -> None:
        spec = t.spec
        self._logs.mirror(spec, t.last_log, sink=sink,
                          emit=lambda message, **fields: self._emit("log", spec, message,
                                                                    **fields))

    # -- plumbing ----------------------------------------------------------------------

    def _emit(self, kind: str, spec: TrainingJobSpec, message: str, **fields: Any) -> None:
        try:
            self._on_event(kind, message, job_id=spec.job_id, model_name=spec.model_name,
                           **fields)
        except Exception:  # a broken event sink must not stop job supervision
            log.exception("on_event failed for job %s", spec.job_id)


def from_kube_config(
    *, config: KubernetesExecutorConfig, on_event: OnEvent | Callable[..., None],
    context: str | None = None,
) -> KubernetesExecutor:
    """An executor on the real API (see :func:`kube_apis`)."""
    apis = kube_apis(context=context)
    return KubernetesExecutor(config=config, batch_api=apis.batch, core_api=apis.core,
                              custom_api=apis.custom, networking_api=apis.networking,
                              on_event=on_event)


__all__ = [
    "KubeApis",
    "KubernetesExecutor",
    "KubernetesExecutorConfig",
    "from_kube_config",
    "job_spec_for",
    "jobset_installed",
    "kube_apis",
    "load_kube_config",
]
