"""The plain functions behind ``headrace topology plan|explain|apply``.

The CLI only parses arguments and prints; everything it does is here and testable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headrace.core.errors import ConfigError, RetriableError
from headrace.topology.chart import applied_objects
from headrace.topology.cluster import ClusterSpec, load_cluster
from headrace.topology.placement import Plan, load_plan, moved_partitions
from headrace.topology.planning import plan_placement
from headrace.topology.validation import validate_all
from headrace.topology.values import ScorerOptions, chart_values
from headrace.trainers.executors.kubernetes import load_kube_config


@dataclass(frozen=True)
class PlanResult:
    cluster: ClusterSpec
    plan: Plan
    moved: int | None  # partitions that changed owner vs --previous
    written: tuple[Path, ...]


def plan_values(*, cluster: ClusterSpec, plan: Plan,
                options: ScorerOptions | None = None) -> dict[str, Any]:
    """The chart values for ``plan``: what ``plan --values-out`` writes and ``apply`` renders."""
    return chart_values(plan=plan, deploy=cluster.deploy, trainer=cluster.trainer,
                        options=options)


def build_objects(*, cluster: ClusterSpec, plan: Plan, namespace: str | None = None,
                  options: ScorerOptions | None = None,
                  chart: Path | None = None) -> list[dict[str, Any]]:
    """The chart's scorer objects + executor RBAC for ``plan``, validated (strict)."""
    values = plan_values(cluster=cluster, plan=plan, options=options)
    # apply mounts the claim `helm install` made (or the cluster file names); it creates no PVC.
    values["dfs"] = {**values.get("dfs", {}), "existingClaim": cluster.deploy.dfs_claim}
    return validate_all(applied_objects(values, namespace=namespace or cluster.deploy.namespace,
                                        chart=chart))


def write_manifests(manifests: list[dict[str, Any]], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i, m in enumerate(manifests):
        path = directory / f"{i:03d}-{m['kind'].lower()}-{m['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(m, sort_keys=False), encoding="utf-8")
        out.append(path)
    return out


def run_plan(*, cluster_path: Path, previous_path: Path | None = None,
             values_out: Path | None = None, manifests_dir: Path | None = None,
             plan_out: Path | None = None, chart: Path | None = None) -> PlanResult:
    cluster = load_cluster(cluster_path)
    previous = load_plan(previous_path) if previous_path else None
    plan = plan_placement(cluster=cluster, previous=previous)
    written: list[Path] = []
    if values_out is not None:
        values = plan_values(cluster=cluster, plan=plan)
        values_out.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        written.append(values_out)
    if manifests_dir is not None:
        written += write_manifests(build_objects(cluster=cluster, plan=plan, chart=chart),
                                   manifests_dir)
    if plan_out is not None:
        plan_out.write_text(plan.to_json(), encoding="utf-8")
        written.append(plan_out)
    moved = moved_partitions(previous, plan) if previous is not None else None
    return PlanResult(cluster, plan, moved, tuple(written))


def plan_json(result: PlanResult) -> str:
    data = json.loads(result.plan.to_json())
    if result.moved is not None:
        data["moved_partitions"] = result.moved
    return json.dumps(data, indent=1, sort_keys=True)


def run_explain(*, cluster_path: Path, previous_path: Path | None = None) -> Plan:
    cluster = load_cluster(cluster_path)
    previous = load_plan(previous_path) if previous_path else None
    return plan_placement(cluster=cluster, previous=previous)


_CORE = {"ServiceAccount": "service_account", "Service": "service"}
_APPS = {"StatefulSet": "stateful_set", "Deployment": "deployment"}
# The client would send a whole object as a JSON Patch (its first content type), which the
# API server refuses; a whole object is a strategic merge (built-in kinds) or a merge patch.
_STRATEGIC = "application/strategic-merge-patch+json"
_MERGE = "application/merge-patch+json"
_CUSTOM = {"ScaledObject": "scaledobjects", "TriggerAuthentication": "triggerauthentications",
           "ServiceMonitor": "servicemonitors"}


def apply_manifests(manifests: list[dict[str, Any]], *, api_client: Any) -> list[str]:
    """Create each object, or patch it when it exists; return one line per object."""
    from kubernetes import client

    apis = {
        "v1": client.CoreV1Api(api_client), "apps/v1": client.AppsV1Api(api_client),
        "policy/v1": client.PolicyV1Api(api_client),
        "rbac.authorization.k8s.io/v1": client.RbacAuthorizationV1Api(api_client),
    }
    custom = client.CustomObjectsApi(api_client)
    done = []
    for m in manifests:
        kind, ns, name = m["kind"], m["metadata"]["namespace"], m["metadata"]["name"]
        if kind in _CUSTOM:
            group, version = m["apiVersion"].split("/")
            plural = _CUSTOM[kind]
            create = _bind(custom.create_namespaced_custom_object, group, version, ns, plural, m)
            patch = _bind(custom.patch_namespaced_custom_object, group, version, ns, plural,
                          name, m, _content_type=_MERGE)
        else:
            snake = _CORE.get(kind) or _APPS.get(kind) or {
                "PodDisruptionBudget": "pod_disruption_budget", "Role": "role",
                "RoleBinding": "role_binding"}[kind]
            api = apis[m["apiVersion"]]
            create = _bind(getattr(api, f"create_namespaced_{snake}"), ns, m)
            patch = _bind(getattr(api, f"patch_namespaced_{snake}"), name, ns, m,
                          _content_type=_STRATEGIC)
        try:
            create()
            done.append(f"created {kind}/{name}")
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise _api_error(exc) from None
            try:
                patch()
            except Exception as exc2:
                raise _api_error(exc2) from None
            done.append(f"patched {kind}/{name}")
    return done


def _bind(fn: Any, *args: Any, **kw: Any) -> Any:
    return lambda: fn(*args, **kw)


def _api_error(exc: BaseException) -> Exception:
    status = getattr(exc, "status", None)
    if status is None:
        return RetriableError(f"no reachable Kubernetes cluster: {_one_line(exc)}")
    return ConfigError(f"Kubernetes API refused the object ({status}): "
                       f"{_one_line(getattr(exc, 'reason', exc))}")


def _one_line(exc: Any) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def kube_api_client(context: str | None = None) -> Any:
    """The API client from in-cluster config or the kubeconfig; one-line error if neither."""
    from kubernetes import client

    try:
        load_kube_config(context=context)
    except ConfigError as exc:
        raise RetriableError(f"no reachable Kubernetes cluster: {exc}") from None
    return client.ApiClient()


def run_apply(*, cluster_path: Path, namespace: str | None = None, dry_run: bool = False,
              previous_path: Path | None = None, api_client: Any = None,
              chart: Path | None = None,
              options: ScorerOptions | None = None) -> tuple[Plan, list[str]]:
    """Plan, render the chart, validate, then print (dry run) or create/patch every object."""
    cluster = load_cluster(cluster_path)
    previous = load_plan(previous_path) if previous_path else None
    plan = plan_placement(cluster=cluster, previous=previous)
    manifests = build_objects(cluster=cluster, plan=plan, namespace=namespace, chart=chart,
                              options=options)
    if dry_run:
        return plan, [yaml.safe_dump_all(manifests, sort_keys=False)]
    return plan, apply_manifests(manifests, api_client=api_client or kube_api_client())
