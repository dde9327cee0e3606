"""Kubernetes objects for a plan, built with the official ``kubernetes.client`` models.

Two scorer modes:

* ``static`` (default): one StatefulSet per locality group; pod ordinal ``i`` runs
  ``headrace score STREAM --partitions <plan's list for i>`` (the ordinal is the suffix of the
  pod's hostname), so ownership is exactly the plan's and survives restarts.
* ``consumer-group``: one Deployment per group whose pods join ``headrace-scorer.<stream>``;
  a KEDA ScaledObject may scale it on consumer lag, capped at the group's partition count
  (a pod beyond that would sit idle).

Every scorer pod gets the DFS mount, nodeAffinity from the plan, ``nvidia.com/gpu`` limits,
probes on ``/livez`` and ``/readyz``, and a termination grace longer than its shutdown budget.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client as k

from headrace.streams.topics import data_topic, scorer_group
from headrace.topology.cluster import Deploy
from headrace.topology.placement import Plan, ScorerGroup
from headrace.trainers.executors.kubernetes_security import (
    container_security_context,
    pod_security_context,
    tmp_env,
    tmp_mount,
    tmp_volume,
)

GPU = "nvidia.com/gpu"
SCORER_SA = "headrace-scorer"
TRAINER_SA = "headrace-trainer"
CONTROL_SA = "headrace-control"
GRACE_MARGIN_S = 10  # time past the scorer's own budget for commit + close before SIGKILL


@dataclass(frozen=True, kw_only=True)
class ScorerOptions:
    mode: Literal["static", "consumer-group"] = "static"
    keda: bool = False
    keda_lag_threshold: int = 1000
    keda_min_replicas: int = 1
    service_monitor: bool = False


def labels(component: str, **extra: str) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": component}
    out.update({f"headrace.io/{k_}": v for k_, v in extra.items()})
    return out


def partition_script(stream: str, pods: list[tuple[int, ...]]) -> str:
    """``sh`` that picks this pod's partitions by StatefulSet ordinal, then execs the scorer."""
    cases = " ".join(f"{i}) P={','.join(map(str, parts))} ;;" for i, parts in enumerate(pods))
    return (
        f'ORD="${{HOSTNAME##*-}}"; case "$ORD" in {cases} '
        f'*) echo "no partitions planned for ordinal $ORD" >&2; exit 64 ;; esac; '
        f'exec headrace score {shlex.quote(stream)} --partitions "$P"'
    )


def _env(g: ScorerGroup, deploy: Deploy) -> list[k.V1EnvVar]:
    secret = [
        k.V1EnvVar(name=var, value_from=k.V1EnvVarSource(
            secret_key_ref=k.V1SecretKeySelector(name=deploy.kafka_secret, key=key)))
        for var, key in (("HEADRACE_BOOTSTRAP", "bootstrap"), ("HEADRACE_KAFKA_CONFIG", "config"))
    ]
    plain = {
        "HEADRACE_DFS_ROOT": deploy.dfs_root,
        "HEADRACE_STREAMS": g.stream,
        "HEADRACE_CLIENT_RACK": g.client_rack,
        "HEADRACE_SCORER_HTTP_PORT": str(deploy.http_port),
        "HEADRACE_SCORER_GRACE_S": str(deploy.grace_s),
        "HEADRACE_SCORER_DEVICE": "gpu:0" if g.gpus else "cpu",
        "HEADRACE_SCORER_BATCH_SIZE": str(deploy.batch_size),
        "HEADRACE_SCORER_MAX_WAIT_MS": str(deploy.max_wait_ms),
        "HEADRACE_SCORER_DECODE_PROCESSES": str(deploy.decode_processes),
    }
    return secret + [k.V1EnvVar(name=n, value=v) for n, v in plain.items()] + tmp_env()


def _probe(path: str, *, period: int, failures: int) -> k.V1Probe:
    return k.V1Probe(http_get=k.V1HTTPGetAction(path=path, port="http"), period_seconds=period,
                     failure_threshold=failures, timeout_seconds=2)


def _pod_template(g: ScorerGroup, deploy: Deploy, command: list[str]) -> k.V1PodTemplateSpec:
    req: dict[str, str] = {"cpu": f"{g.cpu_m}m", "memory": f"{g.memory_mib}Mi"}
    lim: dict[str, str] = {"memory": f"{g.memory_mib}Mi"}
    if g.gpus:
        req[GPU] = lim[GPU] = str(g.gpus)
    # Scorers only read models: the DFS (and any data volume) is mounted read-only.
    mounts = [k.V1VolumeMount(name="dfs", mount_path=deploy.dfs_root, read_only=True),
              tmp_mount()]
    volumes = [k.V1Volume(name="dfs", persistent_volume_claim=k.V1PersistentVolumeClaimVolumeSource(
        claim_name=deploy.dfs_claim)), tmp_volume()]
    if g.volume_claim:
        mounts.append(k.V1VolumeMount(name="data", mount_path=f"/data/{g.volume}",
                                      read_only=True))
        volumes.append(k.V1Volume(name="data", persistent_volume_claim=(
            k.V1PersistentVolumeClaimVolumeSource(claim_name=g.volume_claim))))
    terms = [k.V1NodeSelectorRequirement(key=r.key, operator=r.operator, values=list(r.values))
             for r in g.affinity]
    container = k.V1Container(
        name="scorer", image=deploy.image, command=command, env=_env(g, deploy),
        ports=[k.V1ContainerPort(name="http", container_port=deploy.http_port)],
        resources=k.V1ResourceRequirements(requests=req, limits=lim),
        startup_probe=_probe("/livez", period=5, failures=60),  # model load + warm-up
        liveness_probe=_probe("/livez", period=10, failures=3),
        readiness_probe=_probe("/readyz", period=5, failures=2),
        volume_mounts=mounts,
        security_context=container_security_context(),
    )
    return k.V1PodTemplateSpec(
        metadata=k.V1ObjectMeta(labels=labels("scorer", stream=g.stream, group=g.name)),
        spec=k.V1PodSpec(
            service_account_name=SCORER_SA,
            automount_service_account_token=False,
            security_context=pod_security_context(),
            termination_grace_period_seconds=deploy.grace_s + GRACE_MARGIN_S,
            affinity=k.V1Affinity(node_affinity=k.V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=k.V1NodeSelector(
                    node_selector_terms=[k.V1NodeSelectorTerm(match_expressions=terms)])))
            if terms else None,
            tolerations=[k.V1Toleration(key=t.key, operator=t.operator, value=t.value or None,
                                        effect=t.effect or None) for t in g.tolerations] or None,
            containers=[container], volumes=volumes,
        ),
    )


def scorer_workload(g: ScorerGroup, deploy: Deploy, *, mode: str = "static") -> Any:
    meta = k.V1ObjectMeta(name=f"scorer-{g.name}", namespace=deploy.namespace,
                          labels=labels("scorer", stream=g.stream, group=g.name))
    selector = k.V1LabelSelector(match_labels=labels("scorer", stream=g.stream, group=g.name))
    if mode == "static":
        script = partition_script(g.stream, [p.partitions for p in g.pods])
        return k.V1StatefulSet(
            api_version="apps/v1", kind="StatefulSet", metadata=meta,
            spec=k.V1StatefulSetSpec(
                replicas=len(g.pods), service_name=f"scorer-{g.name}", selector=selector,
                pod_management_policy="Parallel",
                template=_pod_template(g, deploy, ["/bin/sh", "-c", script]),
            ),
        )
    return k.V1Deployment(
        api_version="apps/v1", kind="Deployment", metadata=meta,
        spec=k.V1DeploymentSpec(
            replicas=len(g.pods), selector=selector,
            strategy=k.V1DeploymentStrategy(type="RollingUpdate", rolling_update=(
                k.V1RollingUpdateDeployment(max_surge=0, max_unavailable=1))),
            template=_pod_template(g, deploy, ["headrace", "score", g.stream]),
        ),
    )


def scorer_service(g: ScorerGroup, deploy: Deploy) -> k.V1Service:
    sel = labels("scorer", stream=g.stream, group=g.name)
    return k.V1Service(
        api_version="v1", kind="Service",
        metadata=k.V1ObjectMeta(name=f"scorer-{g.name}", namespace=deploy.namespace, labels=sel),
        spec=k.V1ServiceSpec(cluster_ip="None", selector=sel, ports=[k.V1ServicePort(
            name="http", port=deploy.http_port, target_port="http")]),
    )


def scorer_pdb(g: ScorerGroup, deploy: Deploy) -> k.V1PodDisruptionBudget:
    sel = labels("scorer", stream=g.stream, group=g.name)
    return k.V1PodDisruptionBudget(
        api_version="policy/v1", kind="PodDisruptionBudget",
        metadata=k.V1ObjectMeta(name=f"scorer-{g.name}", namespace=deploy.namespace, labels=sel),
        spec=k.V1PodDisruptionBudgetSpec(max_unavailable=1,
                                         selector=k.V1LabelSelector(match_labels=sel)),
    )


def scaled_object(g: ScorerGroup, deploy: Deploy, options: ScorerOptions) -> dict[str, Any]:
    cap = max(1, len(g.partitions))
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": f"scorer-{g.name}", "namespace": deploy.namespace,
                     "labels": labels("scorer", stream=g.stream, group=g.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": f"scorer-{g.name}", "envSourceContainerName": "scorer"},
            "minReplicaCount": min(options.keda_min_replicas, cap),
            "maxReplicaCount": cap,
            "triggers": [{"type": "kafka", "metadata": {
                "bootstrapServersFromEnv": "HEADRACE_BOOTSTRAP",
                "consumerGroup": scorer_group(g.stream),
                "topic": data_topic(g.stream),
                "lagThreshold": str(options.keda_lag_threshold),
                "allowIdleConsumers": "false",
            }}],
        },
    }


def service_monitor(deploy: Deploy) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "headrace-scorers", "namespace": deploy.namespace,
                     "labels": labels("scorer")},
        "spec": {"selector": {"matchLabels": labels("scorer")},
                 "endpoints": [{"port": "http", "path": "/metrics", "interval": "30s"}]},
    }


def scorer_objects(
    *, plan: Plan, deploy: Deploy, options: ScorerOptions | None = None
) -> list[Any]:
    """Every object the plan's scorers need, in a safe creation order."""
    opts = options or ScorerOptions()
    objs: list[Any] = [k.V1ServiceAccount(
        api_version="v1", kind="ServiceAccount",
        metadata=k.V1ObjectMeta(name=SCORER_SA, namespace=deploy.namespace,
                                labels=labels("scorer")))]
    for g in plan.groups:
        objs += [scorer_service(g, deploy), scorer_workload(g, deploy, mode=opts.mode),
                 scorer_pdb(g, deploy)]
        if opts.keda and opts.mode == "consumer-group":
            objs.append(scaled_object(g, deploy, opts))
    if opts.service_monitor:
        objs.append(service_monitor(deploy))
    return objs


def executor_rbac(*, namespace: str, gang: bool) -> list[Any]:
    """The control plane's ServiceAccount + Role + RoleBinding (it creates and watches the
    training Jobs), and the trainer pods' ServiceAccount, which gets no rights and no token."""
    rules = [
        k.V1PolicyRule(api_groups=["batch"], resources=["jobs"],
                       verbs=["create", "get", "list", "watch", "delete"]),
        k.V1PolicyRule(api_groups=["batch"], resources=["jobs/status"], verbs=["get"]),
        k.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"]),
        k.V1PolicyRule(api_groups=[""], resources=["pods/log"], verbs=["get"]),
        k.V1PolicyRule(api_groups=[""], resources=["services"],
                       verbs=["create", "get", "delete"]),
    ]
    if gang:
        rules.append(k.V1PolicyRule(api_groups=["scheduling.volcano.sh"], resources=["podgroups"],
                                    verbs=["create", "get", "list", "delete"]))
    meta = k.V1ObjectMeta(name=CONTROL_SA, namespace=namespace, labels=labels("control-plane"))
    trainer = k.V1ObjectMeta(name=TRAINER_SA, namespace=namespace, labels=labels("trainer"))
    return [
        k.V1ServiceAccount(api_version="v1", kind="ServiceAccount", metadata=trainer,
                           automount_service_account_token=False),
        k.V1ServiceAccount(api_version="v1", kind="ServiceAccount", metadata=meta,
                           automount_service_account_token=False),
        k.V1Role(api_version="rbac.authorization.k8s.io/v1", kind="Role", metadata=meta,
                 rules=rules),
        k.V1RoleBinding(
            api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding", metadata=meta,
            role_ref=k.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role",
                                 name=CONTROL_SA),
            subjects=[k.RbacV1Subject(kind="ServiceAccount", name=CONTROL_SA,
                                      namespace=namespace)],
        ),
    ]
