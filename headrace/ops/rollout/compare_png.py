"""``models compare --png``: the live comparison as one image (Agg backend, no display):
production vs candidate, and each version vs the truth once labels arrived, with the figures
above them."""

from __future__ import annotations

import math
from pathlib import Path

from headrace.core import confusion_plot
from headrace.core.confusion_plot import Panel
from headrace.rollout.evidence import ESTIMATE_NOTE, LiveEvidence


def summary_lines(ev: LiveEvidence) -> list[str]:
    """The figures ``models compare`` prints, one per line."""
    a, b = f"v{ev.production_version}", f"v{ev.candidate_version}"
    lines = [f"{ev.model_name} {a} vs {b} on {ev.stream}: {ev.rows} paired rows over "
             f"{len(ev.partitions)} partition(s) ({', '.join(ev.roles)})"]
    paired = ev.rows > 0
    if paired:
        lines.append(f"agreement {_pct(ev.agreement)}; errors {a} {ev.production_errors}, "
                     f"{b} {ev.candidate_errors}")
    else:  # a canary's arms score different keys: nothing to pair
        lines.append("no paired rows (a canary scores each key with one version): agreement "
                     "and the paired test need a shadow")
    if ev.labelled:
        for who, v, truth in (("production", a, ev.production_truth),
                              ("candidate", b, ev.candidate_truth)):
            acc, (lo, hi) = ev.accuracy(who)
            lines.append(f"live accuracy {v} {_pct(acc)} (95% Wilson {lo:.1%}-{hi:.1%}, "
                         f"{int(truth.sum())} labelled)")
        if paired:
            lines.append(f"McNemar exact: only {a} right {ev.only_production_right}, only "
                         f"{b} right {ev.only_candidate_right}; p={ev.mcnemar_p():.4g} "
                         f"(two-sided), p={ev.mcnemar_p(alternative='greater'):.4g} "
                         f"({b} better)")
    elif not paired:
        lines.append("no labels yet")
    else:
        lines.append(f"no labels yet: accuracy {ESTIMATE_NOTE} {a} "
                     f"{_pct(ev.estimated_accuracy('production'))}, {b} "
                     f"{_pct(ev.estimated_accuracy('candidate'))}")
    return lines


def render(ev: LiveEvidence, path: Path) -> None:
    a, b = f"v{ev.production_version}", f"v{ev.candidate_version}"
    panels = [Panel(ev.matrix, f"{a} (rows) vs {b} (columns)", a, b)]
    if ev.labelled:
        panels += [Panel(ev.production_truth, f"truth vs {a}", "truth", a),
                   Panel(ev.candidate_truth, f"truth vs {b}", "truth", b)]
    confusion_plot.render(panels, ev.classes, path, caption="\n".join(summary_lines(ev)))


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"
