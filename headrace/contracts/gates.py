"""``gates.yaml``: the one model of the promotion gates, read by the training gate
(``trainers.gate``: offline rules on the validation split) and the live gate
(``rollout.live_gate``: rules on the stream beside production).

``<dfs>/config/gates.yaml`` holds one entry per model (``models.NAME``) and a ``default``;
``live:`` under an entry holds its live rules. Both gates read the same file through
``load_gates``, so a rule is parsed, and its error reported, one way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from headrace.core.errors import ValidationFailed

GATES_FILE = Path("config") / "gates.yaml"


def class_label(value: Any) -> Any:
    # YAML reads an unquoted class name 0 or 1 as a number: take it as the name it is.
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class CellLimit(BaseModel):
    """A limit on one cell of a confusion matrix, named by its two classes (``CLASSES``: the
    fields that hold them) as the user wrote them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    CLASSES: ClassVar[tuple[str, str]]

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, raw: Any) -> Any:
        # YAML 1.1 reads an unquoted `true:` key as the boolean True, and a class 0 as a number.
        if isinstance(raw, dict):
            raw = {("true" if k is True else k): v for k, v in raw.items()}
            return {k: (class_label(v) if k in cls.CLASSES else v) for k, v in raw.items()}
        return raw


class LiveConfusionLimit(CellLimit):
    """Of the records production called ``production``, the most the candidate may call
    ``candidate``."""

    CLASSES = ("production", "candidate")

    production: str
    candidate: str
    max_share: float = Field(ge=0, le=1)


class BetterThanProduction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(default=0.05, gt=0, lt=1)


class LiveGate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_rows: int = Field(default=0, ge=0)
    min_live_agreement: float | None = Field(default=None, ge=0, le=1)
    max_live_confusion: list[LiveConfusionLimit] = Field(default_factory=list)
    min_live_accuracy: float | None = Field(default=None, ge=0, le=1)
    better_than_production: BetterThanProduction | None = None


class ConfusionLimit(CellLimit):
    """Of the validation rows of class ``true``, the most the model may call ``predicted``."""

    CLASSES = ("true", "predicted")

    true: str
    predicted: str
    max_fraction: float = Field(ge=0, le=1)


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
