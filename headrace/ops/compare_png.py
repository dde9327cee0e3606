"""``models compare --png``: the live comparison as one image (Agg backend, no display):
production vs candidate, and each version vs the truth once labels arrived, with the figures
above them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = f"v{ev.production_version}", f"v{ev.candidate_version}"
    panels = [(ev.matrix, f"{a} (rows) vs {b} (columns)", a, b)]
    if ev.labelled:
        panels += [(ev.production_truth, f"truth vs {a}", "truth", a),
                   (ev.candidate_truth, f"truth vs {b}", "truth", b)]
    k = len(ev.classes)
    side = 1.6 + 0.6 * k
    fig, axes = plt.subplots(1, len(panels), figsize=(side * len(panels), side + 1.4),
                             dpi=100, squeeze=False)
    for ax, (m, title, ylab, xlab) in zip(axes[0], panels, strict=True):
        cm = np.asarray(m)
        ax.imshow(cm, cmap="Blues")
        ax.set_xticks(range(k), labels=ev.classes)
        ax.set_yticks(range(k), labels=ev.classes)
        ax.set_xlabel(xlab)
        ax.set_ylabel(ylab)
        ax.set_title(title, fontsize=9)
        top = cm.max() if cm.size else 0
        for i in range(k):
            for j in range(k):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                        color="white" if cm[i, j] > top / 2 else "black", fontsize=8)
    fig.suptitle("\n".join(summary_lines(ev)), fontsize=7, ha="left", x=0.02)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"
