"""Live gate rules: promote a candidate on what it did on the stream beside production.

In ``gates.yaml``, under a model's entry (or ``default``)::

    live:
      min_rows: 5000                  # paired records scored by both versions
      min_live_agreement: 0.9         # share of records both versions labelled alike
      max_live_confusion:             # production class -> candidate class, max share
        - {production: "yes", candidate: "no", max_share: 0.05}
      min_live_accuracy: 0.8          # the candidate's, on labelled records (labels needed)
      better_than_production: {alpha: 0.05}   # exact one-sided McNemar (labels needed)

Every rule is checked and reported, held or not (``LiveCheck``), so a promotion says why it
happened as clearly as a refusal says why not.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from headrace.contracts.gates import LiveGate
from headrace.rollout.evidence import LiveEvidence


class LiveCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule: str
    held: bool
    line: str


def check_live(gate: LiveGate, ev: LiveEvidence) -> list[LiveCheck]:
    """Every rule of ``gate`` against ``ev``; the candidate passes when all hold."""
    out: list[LiveCheck] = []
    paired = int(ev.matrix.sum())
    out.append(LiveCheck(rule="min_rows", held=paired >= gate.min_rows,
                         line=f"{paired} paired rows (min {gate.min_rows})"))
    if gate.min_live_agreement is not None:
        a = ev.agreement
        out.append(LiveCheck(
            rule="min_live_agreement", held=not math.isnan(a) and a >= gate.min_live_agreement,
            line=f"agreement {_pct(a)} (min {gate.min_live_agreement:.1%})"))
    for lim in gate.max_live_confusion:
        share = ev.confusion_share(lim.production, lim.candidate)
        cell = f"production {lim.production} -> candidate {lim.candidate}"
        if share is None:
            out.append(LiveCheck(rule="max_live_confusion", held=False,
                                 line=f"{cell}: no such class among {ev.classes}"))
        else:
            out.append(LiveCheck(rule="max_live_confusion", held=share <= lim.max_share,
                                 line=f"{cell} {share:.1%} (max {lim.max_share:.1%})"))
    labels_needed = gate.min_live_accuracy is not None or gate.better_than_production
    labelled = int(ev.candidate_truth.sum())
    if labels_needed and not labelled:
        out.append(LiveCheck(rule="labels", held=False,
                             line="no labelled records yet (min_live_accuracy and "
                             "better_than_production need labels)"))
        return out
    if gate.min_live_accuracy is not None:
        acc, (lo, hi) = ev.accuracy("candidate")
        out.append(LiveCheck(rule="min_live_accuracy", held=acc >= gate.min_live_accuracy,
                             line=f"candidate live accuracy {acc:.1%} (95% CI {lo:.1%}-"
                             f"{hi:.1%}, {labelled} labelled; min "
                             f"{gate.min_live_accuracy:.1%})"))
    if gate.better_than_production is not None:
        alpha = gate.better_than_production.alpha
        p = ev.mcnemar_p(alternative="greater")
        b, c = ev.only_production_right, ev.only_candidate_right
        out.append(LiveCheck(rule="better_than_production", held=p < alpha,
                             line=f"one-sided McNemar p={p:.4g} (alpha {alpha}; "
                             f"only candidate right {c}, only production right {b})"))
    return out


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.1%}"
