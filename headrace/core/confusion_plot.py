"""The one confusion-matrix renderer: one or more k x k count matrices side by side as a PNG
(Agg backend: no display needed). The trainer's confusion matrix (truth vs predicted) and
``models compare``'s panels (production vs candidate, and each against the truth) are drawn by
it, so they look alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Panel:
    matrix: Any  # k x k counts: rows ``ylabel``, columns ``xlabel``
    title: str
    ylabel: str
    xlabel: str


def render(panels: Sequence[Panel], classes: Sequence[str], path: Path, *,
           caption: str = "") -> None:
    """Draw ``panels`` in a row into ``path``; ``caption`` (lines of text) above them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(classes)
    side = 1.6 + 0.6 * k
    extra = 1.4 if caption else 0.0
    fig, axes = plt.subplots(1, len(panels), figsize=(side * len(panels) + 0.4, side + extra),
                             dpi=100, squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        cm = np.asarray(panel.matrix)
        ax.imshow(cm, cmap="Blues")
        ax.set_xticks(range(k), labels=list(classes))
        ax.set_yticks(range(k), labels=list(classes))
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title, fontsize=9)
        top = cm.max() if cm.size else 0
        for i in range(k):
            for j in range(k):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                        color="white" if cm[i, j] > top / 2 else "black", fontsize=8)
    if caption:
        fig.suptitle(caption, fontsize=7, ha="left", x=0.02)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
