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
this module needs no cluster to test; :func:`from_kube_config` builds the real ones.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from headrace.core.errors import ConfigError, FatalError, HeadraceError, RetriableError
from headrace.core.types import trained_framework
from headrace.trainers.distributed.heartbeat import verdict
from headrace.trainers.executors import kubernetes_kueue as kueue
from headrace.trainers.executors.base import PERMANENT_EXIT_CODES, JobOutcome, JobSpec
from headrace.trainers.executors.kubernetes_objects import (
    CONTAINER,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    ClusterPlacement,
    TrainingJobSpec,
    training_objects,
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
        self._net = networking_api if networking_api is not None else _networking(core_api)
        self._on_event = on_event
        self._timeout = request_timeout_s
        self._watch_s = watch_s
        self._backoff_s = backoff_s
        self._api_tries = max(1, api_tries)
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
        return self._create_attempt(spec)

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
            self._delete_attempt(spec, "Foreground")
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
                log.warning("kubernetes executor: %s", _one_line(exc))
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
                created = self._create_attempt(t.spec) or already
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
            exists = self._owner_uid(spec, missing_ok=True) is not None
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

    def _create_attempt(self, spec: TrainingJobSpec) -> bool:
        """The owner first (a gang's suspended), then what it owns, then let it start: the
        Service and PodGroup exist before any pod, and deleting the owner deletes them."""
        ns = spec.namespace
        owner, *_ = training_objects(spec)
        created = self._create(lambda: self._create_object(ns, owner))
        if spec.pods == 1:
            return created
        uid = self._owner_uid(spec)
        for obj in training_objects(spec, owner_uid=uid)[1:]:
            self._create(functools.partial(self._create_object, ns, obj))
        if spec.gang != "kueue":  # under Kueue, admission unsuspends it
            self._call(lambda: self._patch_owner(spec, {"spec": {"suspend": False}}))
        return created

    def _create_object(self, ns: str, obj: Any) -> Any:
        kind = obj["kind"] if isinstance(obj, dict) else obj.kind
        if kind == "Job":
            return self._batch.create_namespaced_job(ns, obj, _request_timeout=self._timeout)
        if kind == "Service":
            return self._core.create_namespaced_service(ns, obj, _request_timeout=self._timeout)
        if kind == "NetworkPolicy":
            return self._net.create_namespaced_network_policy(ns, obj,
                                                              _request_timeout=self._timeout)
        group, version, plural = _CUSTOM[kind]
        return self._custom.create_namespaced_custom_object(
            group=group, version=version, namespace=ns, plural=plural, body=obj,
            _request_timeout=self._timeout)

    def _owner_uid(self, spec: TrainingJobSpec, *, missing_ok: bool = False) -> str | None:
        if spec.uses_jobset:
            got = self._call(lambda: self._custom.get_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, _request_timeout=self._timeout),
                missing_ok=missing_ok)
            return None if got is None else str(got["metadata"]["uid"])
        job = self._call(lambda: self._batch.read_namespaced_job(
            spec.role_job_names[0], spec.namespace, _request_timeout=self._timeout),
            missing_ok=missing_ok)
        return None if job is None else str(job.metadata.uid)

    def _patch_owner(self, spec: TrainingJobSpec, body: dict[str, Any]) -> Any:
        if spec.uses_jobset:
            return self._custom.patch_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, body=body,
                _request_timeout=self._timeout)
        return self._batch.patch_namespaced_job(spec.role_job_names[0], spec.namespace, body,
                                                _request_timeout=self._timeout)

    def _delete_attempt(self, spec: TrainingJobSpec, propagation: str) -> None:
        """Delete the attempt's owner; the API server's garbage collector deletes the rest."""
        if spec.uses_jobset:
            self._call(lambda: self._custom.delete_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, propagation_policy=propagation,
                _request_timeout=self._timeout), missing_ok=True)
            return
        self._call(lambda: self._batch.delete_namespaced_job(
            spec.role_job_names[0], spec.namespace, propagation_policy=propagation,
            _request_timeout=self._timeout), missing_ok=True)

    # -- status and logs ---------------------------------------------------------------

    def _poll_one(self, t: _Tracked) -> JobOutcome | None:
        spec = t.spec
        st = self._status(t)
        if st is _NOT_YET:
            return None
        if st is None:
            self._emit("failed", spec, "kubernetes job disappeared", reason="deleted")
            return JobOutcome(spec.job_id, False, None, t.failed + 1, "kubernetes job deleted")
        failed = int(st.failed or 0) if st else 0
        # A gang has started when every member runs: until then its members cannot train
        # (they wait for each other), and the missing ones' reason is what to report.
        # (A JobSet reports no ready count: its first active pod stands in.)
        need = 1 if spec.uses_jobset else spec.pods
        if st is not None and t.state == "queued" and _running(st) >= need:
            t.state = "running"
            t.running_since = time.time()
            self._emit("started", spec, f"{_running(st)} of {spec.workers} worker(s) running"
                       f"{self._nodes(spec)}", attempt=failed + 1)
        elif st is not None and t.state == "queued" and int(st.active or 0) > _running(st):
            self._report_waiting(t, attempt=failed + 1)
        elif st is not None and t.state == "queued" and spec.gang == "kueue":
            self._report_waiting(t, attempt=failed + 1, admission=True)
        if failed > t.failed:
            t.failed = failed
            # The failure that ends the Job is not a retry (the Job controller marks it
            # FailureTarget, then Failed; its pod count can arrive first).
            if failed <= spec.max_retries and not _ending(st):
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
            self._delete_attempt(spec, "Background")
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
                return JobOutcome(spec.job_id, False, _exit_code(self, spec), max(failed, 1), why)
        return None

    def _status(self, t: _Tracked) -> Any:
        """The attempt's status as one Job's (``active``, ``failed``, ``conditions``) from
        the watch; None when it is gone, ``_NOT_YET`` before the watch has shown it. A gang
        completes when its workers do and fails when any role does."""
        spec = t.spec
        if spec.uses_jobset:
            got = self._call(lambda: self._custom.get_namespaced_custom_object(
                group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=spec.namespace,
                plural=JOBSET_PLURAL, name=spec.job_name, _request_timeout=self._timeout),
                missing_ok=True)
            if got is None:
                return None
            st = got.get("status") or {}
            rjs = st.get("replicatedJobsStatus") or []
            conds = [_Cond("Complete" if c.get("type") == "Completed" else str(c.get("type")),
                           str(c.get("status")), c.get("reason"), c.get("message"))
                     for c in st.get("conditions") or [] if c.get("type") in ("Completed",
                                                                              "Failed")]
            return _Status(sum(int(r.get("active") or 0) for r in rjs),
                           max((int(r.get("failed") or 0) for r in rjs), default=0), conds)
        statuses = []
        for name in spec.role_job_names:
            if not self._watch.known(name):
                return None if name in t.seen else _NOT_YET
            t.seen.add(name)
            statuses.append(self._watch.status(name) or _Status(0, 0, []))
        if len(statuses) == 1:
            return statuses[0]
        done = [c for c in (statuses[0].conditions or []) if c.type == "Complete"]
        failed = [c for st in statuses for c in (st.conditions or []) if c.type == "Failed"]
        readies = [getattr(st, "ready", None) for st in statuses]
        return _Status(sum(int(st.active or 0) for st in statuses),
                       max(int(st.failed or 0) for st in statuses), done + failed,
                       None if None in readies else sum(int(r) for r in readies if r))

    def _pods(self, spec: TrainingJobSpec) -> list[Any]:
        pods = self._call(lambda: self._core.list_namespaced_pod(
            spec.namespace, label_selector=_selector(spec), _request_timeout=self._timeout),
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
            why = self._not_admitted(t.spec) if admission else _unscheduled(self._pods(t.spec))
        except HeadraceError:
            return
        if why is not None and why != t.waiting:
            t.waiting = why
            what = "admission" if admission else "a node"
            self._emit("waiting", t.spec, f"waiting for {what}: {why}", reason=why,
                       attempt=attempt)

    def _not_admitted(self, spec: TrainingJobSpec) -> str | None:
        def list_call(version: str) -> Any:  # None where that version is not served
            return self._call(lambda: self._custom.list_namespaced_custom_object(
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
        if _exit_code(self, spec) in PERMANENT_EXIT_CODES:
            return False
        disrupted = _disrupted(self, spec)
        if t.restarts >= spec.max_retries and not disrupted:
            return False
        self._delete_attempt(spec, "Background")
        if not disrupted:  # a preempted or evicted member is not the job's fault
            t.restarts += 1
        t.spec = replace(spec, attempt=spec.attempt + 1)
        t.state, t.seen = "queued", set()
        new = t.spec
        self._create_attempt(new)
        what = hung or "gang member failed"
        self._emit("retrying", new, f"{what}: restarting all {new.pods} pods as "
                   f"{new.job_name} from the last checkpoint", attempt=new.attempt)
        return True

    def _mirror_logs(self, t: _Tracked, sink: Callable[[str], None] | None = None) -> None:
        """Send each pod's new log lines as one event (the control plane appends them to the
        job's log, once each: it marks what it appended). With ``sink`` (``jobs logs``): every
        line, to the sink, marking nothing here."""
        spec = t.spec
        pods = self._call(lambda: self._core.list_namespaced_pod(
            spec.namespace, label_selector=_selector(spec), _request_timeout=self._timeout))
        for pod in sorted(pods.items or [], key=lambda p: p.metadata.name):
            name = pod.metadata.name
            if (pod.status.phase if pod.status else None) == "Pending":
                continue
            since = t.last_log.get(name) if sink is None else None
            text = self._call(self._log_reader(spec, name, since), missing_ok=True)
            at: dict[str, int] = {}  # lines so far at each timestamp (several can share one)
            new: list[tuple[str, int, str]] = []
            for line in (text or "").splitlines():
                ts, _, msg = line.partition(" ")
                seq = at[ts] = at.get(ts, -1) + 1
                # RFC 3339 timestamps of one pod sort as strings; skip what was already sent.
                if since is not None and ts <= since:
                    continue
                tag = _member_tag(spec, name)
                line = f"[{tag}] {msg}" if tag else msg
                if sink is not None:
                    sink(line)
                else:
                    new.append((ts, seq, line))
            if new:
                self._emit("log", spec, "\n".join(line for _, _, line in new), pod=name,
                           lines=new)
                t.last_log[name] = new[-1][0]

    def _log_reader(self, spec: TrainingJobSpec, pod: str, since: str | None) -> Callable[[], Any]:
        # After the first read only a recent window is fetched; timestamps drop the overlap.
        window = self._config.log_window_s if since else None

        def read() -> Any:
            return self._core.read_namespaced_pod_log(
                pod, spec.namespace, container=CONTAINER, timestamps=True, since_seconds=window,
                _request_timeout=self._timeout)

        return read

    # -- plumbing ----------------------------------------------------------------------

    def _emit(self, kind: str, spec: TrainingJobSpec, message: str, **fields: Any) -> None:
        try:
            self._on_event(kind, message, job_id=spec.job_id, model_name=spec.model_name,
                           **fields)
        except Exception:  # a broken event sink must not stop job supervision
            log.exception("on_event failed for job %s", spec.job_id)

    def _create(self, fn: Callable[[], Any]) -> bool:
        try:
            self._call(fn)
        except _Conflict:
            return False
        return True

    def _call(self, fn: Callable[[], Any], *, missing_ok: bool = False) -> Any:
        """One API call, retried with backoff while the API answers 5xx, 429 or nothing."""
        for attempt in range(self._api_tries):
            try:
                return self._call_once(fn, missing_ok=missing_ok)
            except RetriableError:
                if attempt + 1 == self._api_tries:
                    raise
                self._stop.wait(min(30.0, self._backoff_s * 2**attempt))
        raise AssertionError("unreachable")

    def _call_once(self, fn: Callable[[], Any], *, missing_ok: bool) -> Any:
        try:
            return fn()
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status == 404 and missing_ok:
                return None
            if status == 409:
                raise _Conflict() from None
            if status in (401, 403):
                raise ConfigError(f"kubernetes API refused the executor ({status}): check its "
                                  "ServiceAccount and Role") from None
            if status is None or status == 429 or int(status) >= 500:
                raise RetriableError(f"kubernetes API unavailable: {_one_line(exc)}") from None
            raise FatalError(f"kubernetes API error {status}: {_one_line(exc)}") from None


def _member_tag(spec: TrainingJobSpec, pod: str) -> str | None:
    """``w1``, ``s0`` or ``sched`` for a gang's pod (``<attempt>-<role>-0-<index>-<suffix>``),
    else None."""
    if spec.pods == 1:
        return None
    for role, tag in (("worker", "w"), ("server", "s"), ("scheduler", "sched")):
        prefix = f"{spec.job_name}-{role}-0-"
        index = pod[len(prefix):].split("-", 1)[0] if pod.startswith(prefix) else ""
        if index.isdecimal():
            return tag if role == "scheduler" else f"{tag}{index}"
    return None


def _ending(st: Any) -> bool:
    return any(c.type in ("Failed", "FailureTarget") and c.status == "True"
               for c in (st.conditions or []))


def _unscheduled(pods: list[Any]) -> str | None:
    """``Reason: message`` of the first Pending pod the scheduler refused (``PodScheduled``
    False), e.g. ``Unschedulable: 0/6 nodes are available: 6 Insufficient nvidia.com/gpu``."""
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        if not pod.status or pod.status.phase != "Pending":
            continue
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return f"{cond.reason or 'Unschedulable'}: {cond.message or ''}".strip(": ")
    return None


def _selector(spec: TrainingJobSpec) -> str:
    sel = f"headrace.io/job={spec.name}"
    return f"{sel},headrace.io/attempt={spec.attempt}" if spec.pods > 1 else sel


def _disrupted(ex: KubernetesExecutor, spec: TrainingJobSpec) -> bool:
    """A member of the attempt was preempted, evicted or drained (``DisruptionTarget``)."""
    pods = ex._call(lambda: ex._core.list_namespaced_pod(
        spec.namespace, label_selector=_selector(spec), _request_timeout=ex._timeout),
        missing_ok=True)
    for pod in (pods.items if pods else []) or []:
        for cond in (getattr(pod.status, "conditions", None) or []) if pod.status else []:
            if cond.type == "DisruptionTarget" and cond.status == "True":
                return True
    return False


def _networking(core_api: Any) -> Any:
    from kubernetes import client

    return client.NetworkingV1Api(core_api.api_client)


_CUSTOM = {"PodGroup": (VOLCANO_GROUP, VOLCANO_VERSION, "podgroups"),
           "JobSet": (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)}


@dataclass(frozen=True)
class _Cond:
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class _Status:
    active: int
    failed: int
    conditions: list[_Cond]
    ready: int | None = None  # None: not reported (JobSet), ``active`` stands in


def _running(st: Any) -> int:
    """Pods running: the Job's ``ready`` count. ``active`` also counts pods still Pending
    (waiting for a GPU, unschedulable), so a job waiting for capacity is not "started" and its
    startup watchdog does not run (D50)."""
    ready = getattr(st, "ready", None)
    return int(ready) if ready is not None else int(st.active or 0)


_NOT_YET = object()  # a Job just created that the watch has not shown yet


class _Conflict(Exception):
    pass


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _exit_code(ex: KubernetesExecutor, spec: TrainingJobSpec) -> int | None:
    """The trainer's last exit code, read from its pods (None if no pod terminated)."""
    pods = ex._call(lambda: ex._core.list_namespaced_pod(
        spec.namespace, label_selector=_selector(spec), _request_timeout=ex._timeout),
        missing_ok=True)
    codes: list[tuple[str, int]] = []
    for pod in (pods.items if pods else []) or []:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            term = cs.state.terminated if cs.state else None
            if cs.name == CONTAINER and term is not None and term.exit_code:
                codes.append((str(term.finished_at or ""), int(term.exit_code)))
    return max(codes)[1] if codes else None


@dataclass(frozen=True)
class KubeApis:
    """The three API objects the executor uses (real ones from :func:`kube_apis`)."""

    batch: Any
    core: Any
    custom: Any
    namespace: str = "headrace"  # where the JobSet question is asked
    networking: Any = None  # NetworkingV1Api (None: on the core API's client)


NO_KUBE_CONFIG = ("no Kubernetes configuration: not running in a pod (KUBERNETES_SERVICE_HOST "
                  "is unset) and no kubeconfig (KUBECONFIG or ~/.kube/config)")


def load_kube_config(*, context: str | None = None) -> None:
    """Load the in-cluster config when running in a pod, else the kubeconfig (``context``);
    ``ConfigError`` (one line naming what is missing) if there is neither -- never a silent
    fallback to local training."""
    try:
        from kubernetes import config as kube_config
    except ImportError:
        raise ConfigError("the Kubernetes executor needs the kubernetes package "
                          "(pip install 'headrace[kubernetes]')") from None
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        try:
            kube_config.load_kube_config(context=context)
        except (kube_config.ConfigException, OSError, TypeError) as exc:
            detail = _one_line(exc)
            if "no configuration found" in detail.lower() or isinstance(exc, FileNotFoundError):
                raise ConfigError(NO_KUBE_CONFIG) from None
            raise ConfigError(f"kubeconfig unusable: {detail}") from None


def kube_apis(*, context: str | None = None) -> KubeApis:
    """The API objects on the loaded configuration (see :func:`load_kube_config`)."""
    load_kube_config(context=context)
    from kubernetes import client

    return KubeApis(batch=client.BatchV1Api(), core=client.CoreV1Api(),
                    custom=client.CustomObjectsApi(), networking=client.NetworkingV1Api())


def jobset_installed(apis: Any) -> bool:
    """Whether the cluster serves JobSet (gangs are then one JobSet each): listing JobSets
    in the namespace answers 404 where its CRD is not installed (a namespaced question, so
    the control plane's Role is enough). Asked once when the executor is built."""
    try:
        apis.custom.list_namespaced_custom_object(
            group=JOBSET_GROUP, version=JOBSET_VERSION, namespace=apis.namespace,
            plural=JOBSET_PLURAL, limit=1, _request_timeout=10)
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status in (401, 403, 404):
            if status != 404:
                log.warning("JobSet: not allowed to list jobsets (%s): gangs are Jobs", status)
            return False
        raise RetriableError(f"kubernetes API unavailable: {_one_line(exc)}") from None
    return True


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
