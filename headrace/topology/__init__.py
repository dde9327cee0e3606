"""Placement planning and Kubernetes object generation.

Public entry points: :func:`load_cluster` (the input), :func:`plan_placement` (the pure,
deterministic, sticky planner), :func:`chart_values` (the Helm values for ``helm/headrace``,
the one source of the Kubernetes objects; :mod:`headrace.topology.chart` renders them), and
the command functions in :mod:`headrace.topology.commands` (``apply`` keeps its objects as a
KEP-3659 ApplySet, :mod:`headrace.topology.applyset`, and prunes what it no longer renders).
"""

from headrace.topology.cluster import ClusterSpec, load_cluster, parse_cluster
from headrace.topology.placement import Plan, load_plan, moved_partitions
from headrace.topology.planning import plan_placement
from headrace.topology.validation import validate_all, validate_object
from headrace.topology.values import ScorerOptions, chart_values

__all__ = [
    "ClusterSpec",
    "Plan",
    "ScorerOptions",
    "chart_values",
    "load_cluster",
    "load_plan",
    "moved_partitions",
    "parse_cluster",
    "plan_placement",
    "validate_all",
    "validate_object",
]
