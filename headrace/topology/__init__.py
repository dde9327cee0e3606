"""Placement planning and Kubernetes object generation.

Public entry points: :func:`load_cluster` (the input), :func:`plan_placement` (the pure,
deterministic, sticky planner), :func:`scorer_objects` / :func:`chart_values` (what to deploy),
and the command functions in :mod:`headrace.topology.commands`.
"""

from headrace.topology.cluster import ClusterSpec, load_cluster, parse_cluster
from headrace.topology.objects import ScorerOptions, executor_rbac, scorer_objects
from headrace.topology.placement import Plan, load_plan, moved_partitions
from headrace.topology.planning import plan_placement
from headrace.topology.validation import validate_all, validate_object
from headrace.topology.values import chart_values

__all__ = [
    "ClusterSpec",
    "Plan",
    "ScorerOptions",
    "chart_values",
    "executor_rbac",
    "load_cluster",
    "load_plan",
    "moved_partitions",
    "parse_cluster",
    "plan_placement",
    "scorer_objects",
    "validate_all",
    "validate_object",
]
