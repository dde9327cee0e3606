"""Kubernetes objects for training: a Job per training job, a gang for multi-worker jobs.
Built with the official ``kubernetes.client`` models. (A schedule's CronJob has one source,
the chart: helm/headrace/templates/schedules.yaml.)

Distributed jobs (``workers > 1`` or parameter servers) have one pod template per role
(:mod:`kubernetes_gang`): workers with the request's resources, parameter servers with their
own (CPU-only unless asked), one small scheduler. With the JobSet CRD present the gang is one
JobSet of ReplicatedJobs (it makes the headless Service); otherwise one indexed Job per role
sharing a headless Service. Every object of an attempt is owned by its first object (the
JobSet, or the worker Job), so deleting that deletes the attempt. A gang has no per-pod retry:
``backoffLimit: 0``, so any member's failure fails it and the executor restarts the gang as a
new attempt (suffix ``-a2``...), which resumes from the last complete checkpoint on the DFS.

Gang scheduling: ``gang="volcano"`` adds a Volcano PodGroup whose ``minMember`` and
``minResources`` are every role's pods and requests, and points the pods at it. ``gang="kueue"``
creates the Job (or JobSet) suspended with a Kueue queue label (a queue is required); Kueue
admits it against quota from the same per-role requests. A multi-role (parameter-server) gang
under Kueue needs JobSet: Kueue admits separate Jobs one by one, which is no gang. Every Job
has ``activeDeadlineSeconds`` (the job timeout), so a hung or never-admitted gang lets go of its
pods. Retry is exit-code based through a ``podFailurePolicy``: exit codes in
``permanent_exit_codes`` (65 and 2, ``PERMANENT_EXIT_CODES``) fail the Job at once, pod
disruptions do not count, anything else retries up to ``max_retries``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from kubernetes import client as k
from kubernetes.utils.quantity import parse_quantity

from headrace.core.errors import ValidationFailed
from headrace.core.naming import check_name
from headrace.core.types import TrainedFramework
from headrace.trainers.distributed.plan import GangPlan, plan_for
from headrace.trainers.executors import kubernetes_gang as gang_pods
from headrace.trainers.executors.base import PERMANENT_EXIT_CODES, job_command
from headrace.trainers.executors.kubernetes_gang import RoleTemplate
from headrace.trainers.executors.kubernetes_netpol import gang_network_policy
from headrace.trainers.executors.kubernetes_security import (
    container_security_context,
    kafka_volumes,
    pod_security_context,
    tmp_env,
    tmp_mount,
    tmp_volume,
)

TF_PORT = gang_pods.TF_PORT
CONTAINER = "trainer"
GPU = "nvidia.com/gpu"
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
VOLCANO_GROUP, VOLCANO_VERSION = "scheduling.volcano.sh", "v1beta1"
DEFAULT_DEADLINE_S = 7 * 86_400
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# A gang pod's hostname is ``<name>-aNN-scheduler-0-<index>``: it must stay a 63-char label.
_GANG_NAME_LIMIT = 40


def k8s_name(raw: str, *, prefix: str, limit: int = 52) -> str:
    """A DNS-1123 label from ``raw``; a hash suffix keeps distinct inputs distinct."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{raw}".lower()).strip("-")
    if base == f"{prefix}-{raw}" and len(base) <= limit:
        return base
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{base[: limit - 9].rstrip('-')}-{digest}"


@dataclass(frozen=True, kw_only=True)
class ClusterPlacement:
    """Where and how every training job runs on the cluster: the executor's configuration
    holds these and each job's spec carries them."""

    image: str
    gpu_image: str | None = None  # for roles that request GPUs; None: ``image`` everywhere
    namespace: str = "headrace"
    dfs_claim: str = "headrace-dfs"
    dfs_root: str = "/dfs"
    kafka_secret: str | None = "headrace-kafka"
    kafka_password_file: str | None = None  # mount the Secret's `password` key here
    kafka_ca_secret: str | None = None
    kafka_client_cert_secret: str | None = None  # mTLS: user.crt/user.key, mounted read-only
    service_account: str = "headrace-trainer"
    gang: Literal["none", "volcano", "kueue"] = "volcano"
    queue: str | None = None
    max_retries: int = 3
    jobset: bool = False  # the JobSet CRD is installed: a gang is one JobSet
    active_deadline_s: int = DEFAULT_DEADLINE_S  # the job timeout, on every Job

    def placement(self) -> dict[str, Any]:
        """These fields by name, to build another ``ClusterPlacement`` from."""
        return {f.name: getattr(self, f.name) for f in fields(ClusterPlacement)}


@dataclass(frozen=True, kw_only=True)
class TrainingJobSpec(ClusterPlacement):
    """Everything needed to run one training job on Kubernetes (no framework imports)."""

    job_id: str
    model_name: str
    framework: TrainedFramework
    workers: int = 1
    servers: int = 0
    strategy: Literal["auto", "allreduce", "parameter_server"] = "auto"
    attempt: int = 1  # a gang restart creates the Job anew as attempt 2, 3...
    gpus_per_worker: int = 1
    gpu_type: str | None = None
    cpu: str = "4"
    memory: str = "16Gi"
    server_cpu: str = "1"
    server_memory: str = "2Gi"
    server_gpus: int = 0
    scheduler_cpu: str = "500m"
    scheduler_memory: str = "512Mi"
    permanent_exit_codes: tuple[int, ...] = PERMANENT_EXIT_CODES
    ttl_after_finished_s: int = 86_400
    gpu_type_label: str = "nvidia.com/gpu.product"
    extra_env: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not _JOB_ID_RE.fullmatch(self.job_id):
            raise ValidationFailed(f"invalid job id {self.job_id!r}")
        check_name(self.model_name, what="model name")
        if not 1 <= self.workers <= 256:
            raise ValidationFailed(f"workers must be 1-256, not {self.workers}")
        plan = plan_for(framework=self.framework, strategy=self.strategy, workers=self.workers,
                        servers=self.servers)
        if self.max_retries < 0 or self.gpus_per_worker < 0 or self.server_gpus < 0:
            raise ValidationFailed("max_retries and GPU counts must be >= 0")
        if self.active_deadline_s < 1:
            raise ValidationFailed("active_deadline_s must be >= 1 (every Job has a deadline)")
        if self.gang == "kueue" and not self.queue:
            raise ValidationFailed("gang kueue needs a queue (the Kueue LocalQueue to admit "
                                   "training Jobs through)")
        if self.gang == "kueue" and plan.kind == "parameter_server" and not self.jobset:
            raise ValidationFailed("gang kueue with parameter servers needs the JobSet CRD: "
                                   "Kueue admits separate role Jobs one at a time")

    @property
    def name(self) -> str:
        return k8s_name(self.job_id, prefix="train",
                        limit=_GANG_NAME_LIMIT if self.pods > 1 else 52)

    @property
    def job_name(self) -> str:
        """This attempt's name: its Job, or for a gang its JobSet, Service and PodGroup."""
        return self.name if self.attempt == 1 else f"{self.name}-a{self.attempt}"

    @property
    def plan(self) -> GangPlan:
        return plan_for(framework=self.framework, strategy=self.strategy, workers=self.workers,
                        servers=self.servers)

    @property
    def pods(self) -> int:
        return gang_pods.pod_count(self.plan)

    @property
    def gang_scheduled(self) -> bool:
        return self.pods > 1 and self.gang == "volcano"

    @property
    def uses_jobset(self) -> bool:
        return self.pods > 1 and self.jobset

    @property
    def roles(self) -> list[RoleTemplate]:
        """Each role's pods and requests (one ``worker`` role for a single-pod job)."""
        plan = self.plan
        out = [RoleTemplate("worker", plan.workers, self.cpu, self.memory, self.gpus_per_worker)]
        if plan.kind == "parameter_server":
            out.append(RoleTemplate("server", plan.servers, self.server_cpu, self.server_memory,
                                    self.server_gpus))
            out.append(RoleTemplate("scheduler", 1, self.scheduler_cpu, self.scheduler_memory))
        return out

    @property
    def role_job_names(self) -> list[str]:
        """The Jobs of this attempt (one per role for a gang)."""
        if self.pods == 1:
            return [self.job_name]
        return [gang_pods.role_job_name(self.job_name, r.role) for r in self.roles]


def gang_requests(spec: TrainingJobSpec) -> dict[str, str]:
    """The whole gang's requests: every role's pods times each pod's requests."""
    cpu_m = sum(int(parse_quantity(r.cpu) * 1000) * r.count for r in spec.roles)
    mem = sum(int(parse_quantity(r.memory)) * r.count for r in spec.roles)
    gpus = sum(r.gpus * r.count for r in spec.roles)
    out = {"cpu": f"{cpu_m}m", "memory": str(mem)}
    if gpus:
        out[GPU] = str(gpus)
    return out


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "headrace",
        "app.kubernetes.io/component": "trainer",
        "headrace.io/job": spec.name,
        "headrace.io/model": spec.model_name,
    }


def _pod_labels(spec: TrainingJobSpec, role: RoleTemplate) -> dict[str, str]:
    labels = _labels(spec)
    if spec.pods > 1:  # the attempt's Service selects only its own pods
        labels.update({"headrace.io/attempt": str(spec.attempt), "headrace.io/role": role.role})
    return labels


def _command(spec: TrainingJobSpec, role: RoleTemplate) -> list[str]:
    if spec.pods == 1:
        return job_command(spec.job_id, python="python")
    return gang_pods.entrypoint(spec.plan, role.role, job_id=spec.job_id,
                                job_name=spec.job_name)


def _cores(cpu: str) -> int:
    return max(1, int(parse_quantity(cpu)))


def _env(spec: TrainingJobSpec, role: RoleTemplate) -> list[k.V1EnvVar]:
    env = [
        k.V1EnvVar(name="HEADRACE_DFS_ROOT", value=spec.dfs_root),
        k.V1EnvVar(name="HEADRACE_JOB_ID", value=spec.job_id),
        k.V1EnvVar(name="HEADRACE_WORKERS", value=str(spec.workers)),
    ]
    if spec.kafka_secret:
        for var, key in (("HEADRACE_BOOTSTRAP", "bootstrap"), ("HEADRACE_KAFKA_CONFIG", "config")):
            ref = k.V1SecretKeySelector(name=spec.kafka_secret, key=key, optional=False)
            env.append(k.V1EnvVar(name=var, value_from=k.V1EnvVarSource(secret_key_ref=ref)))
        if spec.kafka_password_file:
            env.append(k.V1EnvVar(name="HEADRACE_KAFKA_PASSWORD_FILE",
                                  value=spec.kafka_password_file))
    if spec.pods > 1:
        shared = gang_pods.static_env(spec.plan, role.role, job_name=spec.job_name,
                                      cpus=_cores(role.cpu))
        env.extend(k.V1EnvVar(name=n, value=v) for n, v in shared.items()
                   if n != "HEADRACE_WORKERS")
    env.extend(tmp_env())
    env.extend(k.V1EnvVar(name=n, value=v) for n, v in spec.extra_env)
    return env


def _resources(role: RoleTemplate) -> k.V1ResourceRequirements:
    req = {"cpu": role.cpu, "memory": role.memory}
    lim = {"memory": role.memory}
    if role.gpus:
        req[GPU] = lim[GPU] = str(role.gpus)
    return k.V1ResourceRequirements(requests=req, limits=lim)


def _pod_spec(spec: TrainingJobSpec, role: RoleTemplate) -> k.V1PodSpec:
    affinity = None
    if spec.gpu_type and role.gpus:
        term = k.V1NodeSelectorTerm(match_expressions=[k.V1NodeSelectorRequirement(
            key=spec.gpu_type_label, operator="In", values=[spec.gpu_type])])
        affinity = k.V1Affinity(node_affinity=k.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k.V1NodeSelector(
                node_selector_terms=[term])))
    ports = ([k.V1ContainerPort(name=n, container_port=p) for n, p in gang_pods.ports(spec.plan)]
             if spec.pods > 1 else None)
    kafka_vols, kafka_mounts = kafka_volumes(
        kafka_secret=spec.kafka_secret, password_file=spec.kafka_password_file,
        ca_secret=spec.kafka_ca_secret, client_cert_secret=spec.kafka_client_cert_secret)
    # The CUDA image only where the role requests GPUs: servers and the scheduler stay CPU.
    image = spec.gpu_image if role.gpus and spec.gpu_image else spec.image
    container = k.V1Container(
        name=CONTAINER, image=image, command=_command(spec, role), env=_env(spec, role),
        resources=_resources(role), ports=ports,
        volume_mounts=[k.V1VolumeMount(name="dfs", mount_path=spec.dfs_root), tmp_mount(),
                       *kafka_mounts],
        security_context=container_security_context(),
    )
    tolerations = (
        [k.V1Toleration(key=GPU, operator="Exists", effect="NoSchedule")] if role.gpus else None
    )
    return k.V1PodSpec(
        restart_policy="Never",  # the Job controller retries; podFailurePolicy needs Never
        service_account_name=spec.service_account,
        # The trainer never calls the API server: no token in its pods.
        automount_service_account_token=False,
        security_context=pod_security_context(),
        scheduler_name="volcano" if spec.gang_scheduled else None,
        subdomain=spec.job_name if spec.pods > 1 else None,
        affinity=affinity, tolerations=tolerations, containers=[container],
        volumes=[k.V1Volume(
            name="dfs",
            persistent_volume_claim=k.V1PersistentVolumeClaimVolumeSource(claim_name=spec.dfs_claim),
        ), tmp_volume(), *kafka_vols],
    )


def _failure_rules(spec: TrainingJobSpec) -> list[k.V1PodFailurePolicyRule]:
    disrupted = [k.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget",
                                                            status="True")]
    # A single pod's disruption is not its fault (Ignore: no retry used). A gang member's
    # fails the gang Job; the executor sees the disruption and restarts the gang for free.
    rules = [k.V1PodFailurePolicyRule(action="FailJob" if spec.pods > 1 else "Ignore",
                                      on_pod_conditions=disrupted)]
    if spec.permanent_exit_codes:
        rules.insert(0, k.V1PodFailurePolicyRule(
            # Kubernetes 1.27's schema requires onPodConditions on every rule (empty is fine).
            action="FailJob", on_pod_conditions=[],
            on_exit_codes=k.V1PodFailurePolicyOnExitCodesRequirement(
                container_name=CONTAINER, operator="In",
                values=sorted(set(spec.permanent_exit_codes))),
        ))
    return rules


def _job_spec(spec: TrainingJobSpec, role: RoleTemplate, *, suspend: bool | None) -> k.V1JobSpec:
    pod_annotations = {"headrace.io/job-id": spec.job_id}
    if spec.gang_scheduled:
        pod_annotations["scheduling.k8s.io/group-name"] = spec.job_name
    gang = spec.pods > 1
    return k.V1JobSpec(
        completions=role.count, parallelism=role.count,
        completion_mode="Indexed" if gang else "NonIndexed",
        backoff_limit=0 if gang else spec.max_retries,
        pod_failure_policy=k.V1PodFailurePolicy(rules=_failure_rules(spec)),
        active_deadline_seconds=spec.active_deadline_s,
        ttl_seconds_after_finished=None if spec.uses_jobset else spec.ttl_after_finished_s,
        suspend=suspend,
        template=k.V1PodTemplateSpec(
            metadata=k.V1ObjectMeta(labels=_pod_labels(spec, role), annotations=pod_annotations),
            spec=_pod_spec(spec, role),
        ),
    )


def _meta(spec: TrainingJobSpec, name: str, *, queue: bool = False) -> k.V1ObjectMeta:
    labels = _labels(spec)
    if queue and spec.gang == "kueue" and spec.queue:
        labels["kueue.x-k8s.io/queue-name"] = spec.queue
    return k.V1ObjectMeta(name=name, namespace=spec.namespace, labels=labels,
                          annotations={"headrace.io/job-id": spec.job_id,
                                       "headrace.io/attempt": str(spec.attempt)})


def training_jobs(spec: TrainingJobSpec, *, owner_uid: str | None = None) -> list[k.V1Job]:
    """The attempt's Jobs: one, or one indexed Job per role of a gang (workers first). The
    first (the owner) starts suspended in a gang until its Service and PodGroup exist (and
    under Kueue, which unsuspends it); the others are owned by it once ``owner_uid`` is known."""
    jobs = []
    for i, role in enumerate(spec.roles):
        name = spec.role_job_names[i]
        suspend = True if spec.gang == "kueue" or (i == 0 and spec.pods > 1) else None
        meta = _meta(spec, name, queue=i == 0)
        if i > 0 and owner_uid:
            meta.owner_references = [job_owner(spec, owner_uid)]
        jobs.append(k.V1Job(api_version="batch/v1", kind="Job", metadata=meta,
                            spec=_job_spec(spec, role, suspend=suspend)))
    return jobs


def training_job(spec: TrainingJobSpec) -> k.V1Job:
    """The attempt's first Job (a single-pod job's only one; a gang's worker Job)."""
    return training_jobs(spec)[0]


def job_owner(spec: TrainingJobSpec, uid: str) -> k.V1OwnerReference:
    """An ownerReference to the attempt's first object: deleting it deletes the attempt."""
    if spec.uses_jobset:
        return k.V1OwnerReference(api_version=f"{JOBSET_GROUP}/{JOBSET_VERSION}", kind="JobSet",
                                  name=spec.job_name, uid=uid, controller=True,
                                  block_owner_deletion=True)
    return k.V1OwnerReference(api_version="batch/v1", kind="Job", name=spec.role_job_names[0],
                              uid=uid, controller=True, block_owner_deletion=True)


def jobset(spec: TrainingJobSpec) -> dict[str, Any]:
    """A gang as one JobSet: a ReplicatedJob per role, success when the workers complete, no
    JobSet restarts (the executor restarts the gang as a new attempt)."""
    replicated = []
    for role in spec.roles:
        job = _job_spec(spec, role, suspend=None)
        replicated.append({"name": role.role, "replicas": 1, "template": {
            "metadata": {"labels": _pod_labels(spec, role)}, "spec": _plain(job)}})
    meta = _plain(_meta(spec, spec.job_name, queue=True))
    # Suspended until the PodGroup exists (or until Kueue admits it).
    suspend = spec.gang_scheduled or spec.gang == "kueue"
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}", "kind": "JobSet", "metadata": meta,
        "spec": {
            "suspend": suspend,
            "ttlSecondsAfterFinished": spec.ttl_after_finished_s,
            "network": {"enableDNSHostnames": True, "subdomain": spec.job_name,
                        "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["worker"]},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": replicated,
        },
    }


def worker_service(spec: TrainingJobSpec, *, owner_uid: str | None = None) -> k.V1Service:
    """Headless Service giving each gang pod of this attempt a stable DNS name."""
    meta = _meta(spec, spec.job_name)
    if owner_uid:
        meta.owner_references = [job_owner(spec, owner_uid)]
    return k.V1Service(
        api_version="v1", kind="Service", metadata=meta,
        spec=k.V1ServiceSpec(
            cluster_ip="None", publish_not_ready_addresses=True,
            selector={"headrace.io/job": spec.name, "headrace.io/attempt": str(spec.attempt)},
            ports=[k.V1ServicePort(name=n, port=p, target_port=p)
                   for n, p in gang_pods.ports(spec.plan)],
        ),
    )


def network_policy(spec: TrainingJobSpec, *,
                   owner_uid: str | None = None) -> k.V1NetworkPolicy:
    """The attempt's pods accept the gang's ports from pods of this job only."""
    return gang_network_policy(
        name=spec.job_name, namespace=spec.namespace, job_label=spec.name, attempt=spec.attempt,
        plan=spec.plan, labels=_labels(spec), framework=spec.framework,
        annotations={"headrace.io/job-id": spec.job_id, "headrace.io/attempt": str(spec.attempt)},
        owner=job_owner(spec, owner_uid) if owner_uid else None)


def pod_group(spec: TrainingJobSpec, *, owner_uid: str | None = None) -> dict[str, Any]:
    """Volcano PodGroup: the scheduler binds ``minMember`` pods together or none, once the
    whole gang's requests (every role's) fit."""
    body: dict[str, Any] = {"minMember": spec.pods, "minResources": gang_requests(spec)}
    if spec.queue:
        body["queue"] = spec.queue
    meta: dict[str, Any] = {"name": spec.job_name, "namespace": spec.namespace,
                            "labels": _labels(spec)}
    if owner_uid:
        meta["ownerReferences"] = [_plain(job_owner(spec, owner_uid))]
    return {"apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", "kind": "PodGroup",
            "metadata": meta, "spec": body}


def _plain(obj: Any) -> dict[str, Any]:
    data = k.ApiClient().sanitize_for_serialization(obj)
    assert isinstance(data, dict)
    return data


def training_objects(spec: TrainingJobSpec, *, owner_uid: str | None = None) -> list[Any]:
    """Everything of one attempt, owner first (the executor creates them in this order, the
    owner suspended until the rest exist)."""
    if spec.pods == 1:
        return [training_job(spec)]
    if spec.uses_jobset:
        owner: list[Any] = [jobset(spec)]
        rest: list[Any] = []
    else:
        first, *others = training_jobs(spec, owner_uid=owner_uid)
        owner = [first]
        rest = [worker_service(spec, owner_uid=owner_uid), *others]
    # Before the other roles' Jobs: no gang pod starts without it.
    rest.insert(1 if rest else 0, network_policy(spec, owner_uid=owner_uid))
    if spec.gang_scheduled:
        rest.insert(0, pod_group(spec, owner_uid=owner_uid))
    return owner + rest
