"""Kubernetes objects for training: a Job per training job, a gang for multi-worker jobs,
a CronJob per schedule. Built with the official ``kubernetes.client`` models.

Distributed jobs (``workers > 1`` or parameter servers) are one indexed Job with a pod per gang
member and a headless Service for their DNS names (:mod:`kubernetes_gang`). A gang has no
per-pod retry: ``backoffLimit: 0`` and a ``FailJob`` rule for disruptions, so any member's
failure fails the whole Job and the executor restarts the gang as a new Job (attempt suffix
``-a2``...), which resumes from the last complete checkpoint on the DFS.

Gang scheduling: ``gang="volcano"`` adds a Volcano PodGroup with ``minMember = workers`` and
points the pods at it (``schedulerName: volcano`` + the group-name annotation), so all workers
are bound at once or none. ``gang="kueue"`` instead creates the Job suspended with a Kueue queue
label; Kueue admits the whole Job against quota. Retry is exit-code based through a
``podFailurePolicy``: exit codes in ``permanent_exit_codes`` (65 and 2,
``PERMANENT_EXIT_CODES``) fail the Job at once, pod disruptions do not count, anything else
retries up to ``max_retries`` and the trainer resumes
from its last complete checkpoint on the DFS.
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
from headrace.trainers.distributed.plan import GangPlan, plan_for
from headrace.trainers.executors import kubernetes_gang as gang_pods
from headrace.trainers.executors.base import PERMANENT_EXIT_CODES, job_command
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
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


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
    namespace: str = "headrace"
    dfs_claim: str = "headrace-dfs"
    dfs_root: str = "/dfs"
    kafka_secret: str | None = "headrace-kafka"
    kafka_password_file: str | None = None  # mount the Secret's `password` key here
    kafka_ca_secret: str | None = None
    service_account: str = "headrace-trainer"
    gang: Literal["none", "volcano", "kueue"] = "volcano"
    queue: str | None = None
    max_retries: int = 3

    def placement(self) -> dict[str, Any]:
        """These fields by name, to build another ``ClusterPlacement`` from."""
        return {f.name: getattr(self, f.name) for f in fields(ClusterPlacement)}


@dataclass(frozen=True, kw_only=True)
class TrainingJobSpec(ClusterPlacement):
    """Everything needed to run one training job on Kubernetes (no framework imports)."""

    job_id: str
    model_name: str
    framework: Literal["tensorflow", "mxnet"]
    workers: int = 1
    servers: int = 0
    strategy: Literal["auto", "allreduce", "parameter_server"] = "auto"
    attempt: int = 1  # a gang restart creates the Job anew as attempt 2, 3...
    gpus_per_worker: int = 1
    gpu_type: str | None = None
    cpu: str = "4"
    memory: str = "16Gi"
    permanent_exit_codes: tuple[int, ...] = PERMANENT_EXIT_CODES
    active_deadline_s: int | None = None
    ttl_after_finished_s: int = 86_400
    gpu_type_label: str = "nvidia.com/gpu.product"
    extra_env: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not _JOB_ID_RE.fullmatch(self.job_id):
            raise ValidationFailed(f"invalid job id {self.job_id!r}")
        check_name(self.model_name, what="model name")
        if not 1 <= self.workers <= 256:
            raise ValidationFailed(f"workers must be 1-256, not {self.workers}")
        plan_for(framework=self.framework, strategy=self.strategy, workers=self.workers,
                 servers=self.servers)
        if self.max_retries < 0 or self.gpus_per_worker < 0:
            raise ValidationFailed("max_retries and gpus_per_worker must be >= 0")

    @property
    def name(self) -> str:
        return k8s_name(self.job_id, prefix="train")

    @property
    def job_name(self) -> str:
        """The Job of this attempt (the Service, PodGroup and labels keep ``name``)."""
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


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "headrace",
        "app.kubernetes.io/component": "trainer",
        "headrace.io/job": spec.name,
        "headrace.io/model": spec.model_name,
    }


def _command(spec: TrainingJobSpec) -> list[str]:
    if spec.pods == 1:
        return job_command(spec.job_id, python="python")
    return gang_pods.entrypoint(spec.plan, job_id=spec.job_id, job_name=spec.job_name,
                                service=spec.name)


def _cores(cpu: str) -> int:
    return max(1, int(cpu[:-1]) // 1000 if cpu.endswith("m") else int(float(cpu)))


def _env(spec: TrainingJobSpec) -> list[k.V1EnvVar]:
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
        shared = gang_pods.static_env(spec.plan, job_name=spec.job_name, service=spec.name,
                                      cpus=_cores(spec.cpu))
        env.extend(k.V1EnvVar(name=n, value=v) for n, v in shared.items()
                   if n != "HEADRACE_WORKERS")
    env.extend(tmp_env())
    env.extend(k.V1EnvVar(name=n, value=v) for n, v in spec.extra_env)
    return env


def _resources(spec: TrainingJobSpec) -> k.V1ResourceRequirements:
    req = {"cpu": spec.cpu, "memory": spec.memory}
    lim = {"memory": spec.memory}
    if spec.gpus_per_worker:
        req[GPU] = lim[GPU] = str(spec.gpus_per_worker)
    return k.V1ResourceRequirements(requests=req, limits=lim)


def _pod_spec(spec: TrainingJobSpec) -> k.V1PodSpec:
    affinity = None
    if spec.gpu_type:
        term = k.V1NodeSelectorTerm(match_expressions=[k.V1NodeSelectorRequirement(
            key=spec.gpu_type_label, operator="In", values=[spec.gpu_type])])
        affinity = k.V1Affinity(node_affinity=k.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k.V1NodeSelector(
                node_selector_terms=[term])))
    ports = ([k.V1ContainerPort(name=n, container_port=p) for n, p in gang_pods.ports(spec.plan)]
             if spec.pods > 1 else None)
    kafka_vols, kafka_mounts = kafka_volumes(
        kafka_secret=spec.kafka_secret, password_file=spec.kafka_password_file,
        ca_secret=spec.kafka_ca_secret)
    container = k.V1Container(
        name=CONTAINER, image=spec.image, command=_command(spec), env=_env(spec),
        resources=_resources(spec), ports=ports,
        volume_mounts=[k.V1VolumeMount(name="dfs", mount_path=spec.dfs_root), tmp_mount(),
                       *kafka_mounts],
        security_context=container_security_context(),
    )
    tolerations = (
        [k.V1Toleration(key=GPU, operator="Exists", effect="NoSchedule")]
        if spec.gpus_per_worker else None
    )
    return k.V1PodSpec(
        restart_policy="Never",  # the Job controller retries; podFailurePolicy needs Never
        service_account_name=spec.service_account,
        # The trainer never calls the API server: no token in its pods.
        automount_service_account_token=False,
        security_context=pod_security_context(),
        scheduler_name="volcano" if spec.gang_scheduled else None,
        subdomain=spec.name if spec.pods > 1 else None,
        affinity=affinity, tolerations=tolerations, containers=[container],
        volumes=[k.V1Volume(
            name="dfs",
            persistent_volume_claim=k.V1PersistentVolumeClaimVolumeSource(claim_name=spec.dfs_claim),
        ), tmp_volume(), *kafka_vols],
    )


def training_job(spec: TrainingJobSpec) -> k.V1Job:
    labels = _labels(spec)
    pod_annotations = {"headrace.io/job-id": spec.job_id}
    if spec.gang_scheduled:
        pod_annotations["scheduling.k8s.io/group-name"] = spec.name
    job_labels = dict(labels)
    if spec.gang == "kueue" and spec.queue:
        job_labels["kueue.x-k8s.io/queue-name"] = spec.queue
    rules = [k.V1PodFailurePolicyRule(
        action="Ignore",
        on_pod_conditions=[k.V1PodFailurePolicyOnPodConditionsPattern(
            type="DisruptionTarget", status="True")],
    )]
    if spec.pods > 1:  # a gang: any failure fails the Job; the executor restarts the gang
        rules[0] = k.V1PodFailurePolicyRule(action="FailJob", on_pod_conditions=[
            k.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")])
    if spec.permanent_exit_codes:
        rules.insert(0, k.V1PodFailurePolicyRule(
            action="FailJob",
            on_exit_codes=k.V1PodFailurePolicyOnExitCodesRequirement(
                container_name=CONTAINER, operator="In",
                values=sorted(set(spec.permanent_exit_codes))),
        ))
    return k.V1Job(
        api_version="batch/v1", kind="Job",
        metadata=k.V1ObjectMeta(name=spec.job_name, namespace=spec.namespace, labels=job_labels,
                                annotations={"headrace.io/job-id": spec.job_id,
                                             "headrace.io/attempt": str(spec.attempt)}),
        spec=k.V1JobSpec(
            completions=spec.pods, parallelism=spec.pods,
            completion_mode="Indexed" if spec.pods > 1 else "NonIndexed",
            backoff_limit=0 if spec.pods > 1 else spec.max_retries,
            pod_failure_policy=k.V1PodFailurePolicy(rules=rules),
            active_deadline_seconds=spec.active_deadline_s,
            ttl_seconds_after_finished=spec.ttl_after_finished_s,
            suspend=True if spec.gang == "kueue" else None,
            template=k.V1PodTemplateSpec(
                metadata=k.V1ObjectMeta(labels=labels, annotations=pod_annotations),
                spec=_pod_spec(spec),
            ),
        ),
    )


def worker_service(spec: TrainingJobSpec) -> k.V1Service:
    """Headless Service giving each indexed pod a stable DNS name (TF_CONFIG, DMLC root)."""
    return k.V1Service(
        api_version="v1", kind="Service",
        metadata=k.V1ObjectMeta(name=spec.name, namespace=spec.namespace, labels=_labels(spec)),
        spec=k.V1ServiceSpec(
            cluster_ip="None", publish_not_ready_addresses=True,
            selector={"headrace.io/job": spec.name},
            ports=[k.V1ServicePort(name=n, port=p, target_port=p)
                   for n, p in gang_pods.ports(spec.plan)],
        ),
    )


def pod_group(spec: TrainingJobSpec) -> dict[str, Any]:
    """Volcano PodGroup: the scheduler binds ``minMember`` pods together or none, once the
    whole gang's requests fit (every pod of the indexed Job requests the same)."""
    n = spec.pods
    min_res = {"cpu": f"{int(parse_quantity(spec.cpu) * 1000) * n}m",
               "memory": str(int(parse_quantity(spec.memory)) * n)}
    if spec.gpus_per_worker:
        min_res[GPU] = str(spec.gpus_per_worker * n)
    body: dict[str, Any] = {"minMember": spec.pods, "minResources": min_res}
    if spec.queue:
        body["queue"] = spec.queue
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": _labels(spec)},
        "spec": body,
    }


def training_objects(spec: TrainingJobSpec) -> list[Any]:
    """In creation order: the gang and the Service first, so pods find them."""
    objs: list[Any] = []
    if spec.gang_scheduled:
        objs.append(pod_group(spec))
    if spec.pods > 1:
        objs.append(worker_service(spec))
    objs.append(training_job(spec))
    return objs


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """A cron schedule that publishes TrainRequested (``headrace schedule fire NAME``)."""

    name: str
    cron: str
    image: str
    namespace: str = "headrace"
    timezone: str | None = None
    kafka_secret: str = "headrace-kafka"
    kafka_password_file: str | None = None
    kafka_ca_secret: str | None = None
    service_account: str | None = None
    triggers_config_map: str | None = None  # holds triggers.yaml (HEADRACE_TRIGGERS)
    command: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name(self.name, what="schedule name")
        if len(self.cron.split()) != 5 and not self.cron.startswith("@"):
            raise ValidationFailed(f"schedule {self.name}: cron needs 5 fields: {self.cron!r}")


def schedule_cronjob(spec: ScheduleSpec) -> k.V1CronJob:
    name = k8s_name(spec.name, prefix="schedule")
    labels = {"app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": "schedule",
              "headrace.io/schedule": spec.name}
    env = [
        k.V1EnvVar(name=var, value_from=k.V1EnvVarSource(
            secret_key_ref=k.V1SecretKeySelector(name=spec.kafka_secret, key=key)))
        for var, key in (("HEADRACE_BOOTSTRAP", "bootstrap"), ("HEADRACE_KAFKA_CONFIG", "config"))
    ]
    if spec.kafka_password_file:
        env.append(k.V1EnvVar(name="HEADRACE_KAFKA_PASSWORD_FILE", value=spec.kafka_password_file))
    env.extend(tmp_env())
    command = list(spec.command) or ["headrace", "schedule", "fire", spec.name]
    kafka_vols, kafka_mounts = kafka_volumes(
        kafka_secret=spec.kafka_secret, password_file=spec.kafka_password_file,
        ca_secret=spec.kafka_ca_secret)
    if spec.triggers_config_map:
        env.append(k.V1EnvVar(name="HEADRACE_TRIGGERS",
                              value="/etc/headrace/triggers/triggers.yaml"))
        kafka_vols.append(k.V1Volume(name="triggers", config_map=k.V1ConfigMapVolumeSource(
            name=spec.triggers_config_map)))
        kafka_mounts.append(k.V1VolumeMount(name="triggers", mount_path="/etc/headrace/triggers",
                                            read_only=True))
    pod = k.V1PodSpec(
        restart_policy="OnFailure",
        service_account_name=spec.service_account,
        automount_service_account_token=False,
        security_context=pod_security_context(),
        containers=[k.V1Container(
            name="fire", image=spec.image, command=command, env=env,
            resources=k.V1ResourceRequirements(requests={"cpu": "100m", "memory": "128Mi"},
                                               limits={"memory": "256Mi"}),
            security_context=container_security_context(),
            volume_mounts=[tmp_mount(), *kafka_mounts],
        )],
        volumes=[tmp_volume(), *kafka_vols],
    )
    return k.V1CronJob(
        api_version="batch/v1", kind="CronJob",
        metadata=k.V1ObjectMeta(name=name, namespace=spec.namespace, labels=labels),
        spec=k.V1CronJobSpec(
            schedule=spec.cron, time_zone=spec.timezone,
            # The slot is the idempotency key, so a late or repeated run is harmless; Forbid
            # just avoids piling up runs while the broker is down.
            concurrency_policy="Forbid", starting_deadline_seconds=300,
            successful_jobs_history_limit=3, failed_jobs_history_limit=3,
            job_template=k.V1JobTemplateSpec(
                metadata=k.V1ObjectMeta(labels=labels),
                spec=k.V1JobSpec(backoff_limit=4, template=k.V1PodTemplateSpec(
                    metadata=k.V1ObjectMeta(labels=labels), spec=pod)),
            ),
        ),
    )
