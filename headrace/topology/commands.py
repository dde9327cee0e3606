"""The plain functions behind ``headrace topology plan|explain|apply``.

The CLI only parses arguments and prints; everything it does is here and testable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headrace.topology import kube_access
from headrace.topology.applyset import ApplySet, apply_set, plan_changes
from headrace.topology.chart import applied_objects
from headrace.topology.cluster import ClusterSpec, load_cluster
from headrace.topology.kube_rest import Rest
from headrace.topology.placement import Plan, load_plan, moved_partitions
from headrace.topology.planning import plan_placement
from headrace.topology.unscheduled import unscheduled
from headrace.topology.validation import validate_all
from headrace.topology.values import ScorerOptions, chart_values


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


def run_explain_live(*, cluster_path: Path, namespace: str | None = None,
                     context: str | None = None, api_client: Any = None) -> list[str]:
    """One line per Headrace pod in the namespace the scheduler left Pending, with its
    reason (the namespace defaults to the cluster file's)."""
    ns = namespace or load_cluster(cluster_path).deploy.namespace
    return [u.line() for u in unscheduled(api_client or kube_api_client(context), ns)]


def kube_api_client(context: str | None = None) -> Any:
    """The API client from the kubeconfig or the pod's service account; one-line errors."""
    return kube_access.api_client(context=context)


def run_apply(*, cluster_path: Path, namespace: str | None = None, dry_run: bool = False,
              render: bool = False, previous_path: Path | None = None, api_client: Any = None,
              context: str | None = None, chart: Path | None = None,
              options: ScorerOptions | None = None, server_side: bool = True,
              force_conflicts: bool = False) -> tuple[Plan, list[str]]:
    """Plan, render the chart, validate, then apply the objects as one ApplySet (server-side
    apply as field manager ``headrace``, or client-side create and patch; deleting what an
    earlier apply made and this one no longer wants).

    ``render``: the objects as YAML, no cluster needed. ``dry_run``: the creates, patches and
    deletes an apply would make (reads the cluster, changes nothing).
    """
    cluster = load_cluster(cluster_path)
    previous = load_plan(previous_path) if previous_path else None
    plan = plan_placement(cluster=cluster, previous=previous)
    ns = namespace or cluster.deploy.namespace
    aset = ApplySet(namespace=ns)
    manifests = build_objects(cluster=cluster, plan=plan, namespace=ns, chart=chart,
                              options=options)
    if render:
        return plan, [yaml.safe_dump_all([aset.member(m) for m in manifests], sort_keys=False)]
    rest = Rest(api_client or kube_api_client(context))
    if dry_run:
        return plan, [c.line(done=False) for c in plan_changes(
            rest, aset, manifests, server_side=server_side, force=force_conflicts)]
    changes = apply_set(rest, aset, manifests, server_side=server_side, force=force_conflicts)
    return plan, [c.line(done=True) for c in changes]
