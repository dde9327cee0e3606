"""Human-readable views of a plan: the summary table and the reasons for non-local decisions."""

from __future__ import annotations

from rich.table import Table

from headrace.topology.placement import Plan
from headrace.topology.planning import partition_ranges


def plan_table(plan: Plan) -> Table:
    t = Table(title="Headrace placement plan", show_lines=False)
    for col in ("group", "stream", "rack", "zone", "pods", "GPU/pod", "partitions", "affinity"):
        t.add_column(col, overflow="fold")
    for g in plan.groups:
        aff = "; ".join(f"{r.key} {r.operator} {','.join(r.values)}" for r in g.affinity)
        t.add_row(g.name, g.stream, g.rack, g.zone, str(len(g.pods)),
                  f"{g.gpus}{' ' + g.gpu_type if g.gpu_type else ''}",
                  partition_ranges(g.partitions), aff)
    s = plan.stats
    t.caption = (f"{s.placed}/{s.partitions} partitions placed, {s.in_rack_share:.1%} in-rack, "
                 f"{s.pods} pods, {s.gpus} GPUs"
                 + (f"; {len(plan.explanations)} decision(s) not local - see `explain`"
                    if plan.explanations else ""))
    return t


def explain_lines(plan: Plan) -> list[str]:
    """One line per non-local decision (grouped by stream, reason and target group)."""
    if not plan.explanations:
        s = plan.stats
        return [f"every decision is local: {s.placed} partitions read in-rack"]
    return [f"[{e.reason}] {e.message}" for e in plan.explanations]
