"""The promotion gate: thresholds on the new version, and no regression against production
measured on the same validation data.

Configuration: ``<dfs>/config/gates.yaml``, read by ``contracts.gates`` (one file for every
model; snapshotted into ``jobs/<id>/gate.json`` the first time a job evaluates, so a retried job
keeps its gate)::

    default:                      # models without their own entry
      max_regression: {accuracy: 0.01}
    models:
      demo:
        min: {accuracy: 0.8, macro_f1: 0.7}     # overall lower bounds
        max: {loss: 0.6}                         # overall upper bounds
        min_class_recall: 0.5                    # every class
        class_recall: {"2": 0.7}                 # named classes
        max_confusion:                           # a cell as a fraction of its true row
          - {true: "0", predicted: "1", max_fraction: 0.1}
        max_regression: {accuracy: 0.02, class_recall: 0.05}  # vs production, same data
        promote: true                            # false: store only, never promote
        live: {min_rows: 5000, better_than_production: {alpha: 0.05}}
                                                 # live rules: headrace.rollout.live_gate

``max_regression`` keys are metric names (direction known: loss/rmse/mae lower is better) or
``class_recall`` for every class's recall. No file: the default above.

Every gate (with or without a file) also holds back a model that does not beat chance on the
validation rows (``headrace.trainers.chance``): a classifier's accuracy above
``max(validation majority rate, 1/k)`` by a one-sided exact binomial test at ``alpha`` 0.01,
recall > 0 for every class with >= 10 validation rows, and a log loss below both the uniform
and the class-frequency predictors'; a regressor's squared errors below the training mean's by
a one-sided paired t-test at 0.01. A gate entry may change ``baseline: {alpha, accuracy,
loss, rmse, min_class_rows}`` or drop the rule (``baseline: null``). Each reason names its
rule (``GateResult.held_by``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from headrace.contracts.gates import BaselineMargin, Gate
from headrace.trainers import chance
from headrace.trainers.evaluation import Evaluation, lower_is_better


class GateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    passed: bool
    reasons: list[str] = Field(default_factory=list)  # why it failed; empty when passed
    production_version: int | None = None
    production_metrics: dict[str, float] = Field(default_factory=dict)
    promote: bool = True
    # The rules that held it back: baseline, min, max, class_recall, confusion, regression.
    held_by: list[str] = Field(default_factory=list)
    baseline_metrics: dict[str, float] = Field(default_factory=dict)


def check(gate: Gate, new: Evaluation, production: Evaluation | None = None,
          production_version: int | None = None, *,
          baseline: Evaluation | None = None) -> GateResult:
    reasons: list[str] = []
    held: list[str] = []

    def rule(name: str, start: int) -> None:
        if len(reasons) > start and name not in held:
            held.append(name)

    m = new.metrics
    if gate.baseline is not None and baseline is not None:
        reasons += _baseline(gate.baseline, new, baseline)
        rule("baseline", 0)
    n = len(reasons)
    for side, bounds, sign in (("min", gate.min, -1), ("max", gate.max, 1)):
        for name, bound in bounds.items():
            if name not in m:
                reasons.append(f"metric {name} is not computed for this model")
            elif sign * (m[name] - bound) > 0:  # below a min, above a max
                reasons.append(f"{name} {m[name]:.4f} {'<' if sign < 0 else '>'} "
                               f"{side} {bound:.4f}")
        rule(side, n)
        n = len(reasons)
    recalls = {k.removeprefix("recall."): v for k, v in m.items() if k.startswith("recall.")}
    if gate.min_class_recall is not None:
        for cls, r in recalls.items():
            if r < gate.min_class_recall:
                reasons.append(f"recall of class {cls} {r:.4f} < min {gate.min_class_recall:.4f}")
    for cls, bound in gate.class_recall.items():
        if cls not in recalls:
            reasons.append(f"class {cls} is not among the model's classes")
        elif recalls[cls] < bound:
            reasons.append(f"recall of class {cls} {recalls[cls]:.4f} < min {bound:.4f}")
    rule("class_recall", n)
    n = len(reasons)
    for lim in gate.max_confusion:
        frac = _cell_fraction(new, lim.true, lim.predicted)
        if frac is None:
            reasons.append(f"confusion cell {lim.true}->{lim.predicted} does not exist")
        elif frac > lim.max_fraction:
            reasons.append(f"{frac:.1%} of class {lim.true} predicted as {lim.predicted} "
                           f"> max {lim.max_fraction:.1%}")
    rule("confusion", n)
    n = len(reasons)
    if production is not None:
        reasons += _regressions(gate, new, production, production_version)
    rule("regression", n)
    return GateResult(passed=not reasons, reasons=reasons, production_version=production_version,
                      production_metrics=production.metrics if production else {},
                      promote=gate.promote, held_by=held,
                      baseline_metrics=baseline.metrics if baseline else {})


def _baseline(margin: BaselineMargin, new: Evaluation, base: Evaluation) -> list[str]:
    """The model must beat the trivial predictor on the same validation rows, with confidence."""
    return chance.reasons(margin, new, base)


def _regressions(gate: Gate, new: Evaluation, prod: Evaluation, version: int | None
                 ) -> list[str]:
    out: list[str] = []
    tag = f"production v{version}" if version is not None else "production"
    for name, tol in gate.max_regression.items():
        names = ([k for k in new.metrics if k.startswith("recall.")] if name == "class_recall"
                 else [name])
        for metric in names:
            if metric not in new.metrics or metric not in prod.metrics:
                continue
            a, b = new.metrics[metric], prod.metrics[metric]
            worse = (a - b) if lower_is_better(metric) else (b - a)
            if worse > tol:
                out.append(f"{metric} {a:.4f} is worse than {tag} {b:.4f} by {worse:.4f} "
                           f"(allowed {tol:.4f})")
    return out


def _cell_fraction(ev: Evaluation, true: str, predicted: str) -> float | None:
    if true not in ev.classes or predicted not in ev.classes:
        return None
    i, j = ev.classes.index(true), ev.classes.index(predicted)
    row = ev.confusion_matrix[i]
    total = sum(row)
    return row[j] / total if total else 0.0
