"""The promotion gate: thresholds on the new version, and no regression against production
measured on the same validation data.

Configuration: ``<dfs>/config/gates.yaml`` (one file for every model; snapshotted into
``jobs/<id>/gate.json`` the first time a job evaluates, so a retried job keeps its gate)::

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

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from headrace.core.errors import ValidationFailed
from headrace.rollout.live_gate import LiveGate, class_label
from headrace.trainers import chance
from headrace.trainers.evaluation import Evaluation, lower_is_better

GATES_FILE = Path("config") / "gates.yaml"


class ConfusionLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    true: str
    predicted: str
    max_fraction: float = Field(ge=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, raw: Any) -> Any:
        # YAML 1.1 reads an unquoted `true:` key as the boolean True, and `0` as a number:
        # take them as the user meant them.
        if isinstance(raw, dict):
            raw = {("true" if k is True else k): (class_label(v) if k in (True, "true", "predicted")
                                                    else v) for k, v in raw.items()}
        return raw


class BaselineMargin(BaseModel):
    """How much better than the trivial predictor a model must be (``chance``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(default=0.01, gt=0, le=1)  # one-sided test level; 1: no test
    accuracy: float = Field(default=0.0, ge=-1, le=1)  # absolute, added to the trivial rate
    rmse: float = Field(default=0.0, ge=-1, lt=1)  # relative reduction of the mean's RMSE
    loss: float = Field(default=0.0, ge=-1, lt=1)  # relative reduction of the trivial log loss
    min_class_rows: int = Field(default=10, ge=1)  # classes this big need recall > 0


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: BaselineMargin | None = Field(default_factory=BaselineMargin)

    min: dict[str, float] = Field(default_factory=dict)
    max: dict[str, float] = Field(default_factory=dict)
    min_class_recall: float | None = Field(default=None, ge=0, le=1)
    class_recall: dict[str, float] = Field(default_factory=dict)
    max_confusion: list[ConfusionLimit] = Field(default_factory=list)
    max_regression: dict[str, float] = Field(default_factory=dict)
    promote: bool = True
    # Rules over the live comparison window (``models promote --if-live-gate``); the offline
    # gate above ignores them.
    live: LiveGate | None = None

    @field_validator("class_recall", mode="before")
    @classmethod
    def _class_names(cls, raw: Any) -> Any:
        # Class names are strings; an unquoted `2:` key is read as a number.
        return {class_label(k): v for k, v in raw.items()} if isinstance(raw, dict) else raw


DEFAULT_GATE = Gate(max_regression={"accuracy": 0.01})


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


def load_gates(root: Path, model: str) -> Gate:
    """The gate for ``model`` from ``<root>/config/gates.yaml``; the default without one."""
    path = root / GATES_FILE
    if not path.exists():
        return DEFAULT_GATE
    models: Any = {}
    try:
        doc: Any = yaml.safe_load(path.read_text()) or {}
        models = doc.get("models") or {}
        raw = models.get(model, doc.get("default"))
        return DEFAULT_GATE if raw is None else Gate.model_validate(raw)
    except ValidationError as exc:
        where = f"models.{model}" if model in models else "default"
        raise ValidationFailed(f"gates file {path}: {validation_errors(exc, where)}") from None
    except (yaml.YAMLError, AttributeError) as exc:
        raise ValidationFailed(f"gates file {path}: {str(exc).splitlines()[0]}") from None


def validation_errors(exc: ValidationError, prefix: str) -> str:
    """Every error of ``exc``, one line each: ``N errors:`` then ``  at.path: message``."""
    errors = exc.errors()
    lines = [f"{len(errors)} error{'s' if len(errors) != 1 else ''}:"]
    for e in errors:
        loc = ".".join([prefix, *(str(p) for p in e["loc"])])
        lines.append(f"  {loc}: {e['msg']}")
    return "\n".join(lines)


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
