"""The search space grammar: ``KEY=VALUES`` items separated by spaces, each KEY a ModelSpec
hyperparameter (learning_rate, batch_size, filters, hidden, dropout, ...).

=============================  ==============================================================
``learning_rate=log:1e-4:1e-2``  log-uniform between the bounds (integers: log-uniform integers)
``dropout=0.0:0.5``              uniform between the bounds (integers when both are integers)
``batch_size=32,64,128``         one of the listed values
``filters=16,32|32,64``          for a tuple hyperparameter (filters, hidden, image_size) ``|``
                                 separates the choices and ``,`` the numbers inside one
=============================  ==============================================================

Every value a trial can draw is checked against ModelSpec here, so a bad space is refused with
one line before any trial runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import ValidationError

from headrace.contracts import ModelSpec
from headrace.core.errors import ValidationFailed

# Hyperparameters a study may search: the ModelSpec fields that shape a model or its training.
NOT_SEARCHABLE = frozenset({"model", "task", "label", "features", "epochs", "seed",
                            "checkpoint_every_steps", "strategy", "init_weights",
                            "validation_split",  # trials compare on one split
                            # the drift profile's calibration, not the model
                            "drift_window", "drift_false_alarm_rate"})
SEARCHABLE = tuple(sorted(k for k in ModelSpec.model_fields if k not in NOT_SEARCHABLE))
Choice = int | float | str


@dataclass(frozen=True)
class Space:
    """A parsed search space: Optuna distributions by hyperparameter, and the text it came
    from (stored with the study, so a resumed study can check it is the same search)."""

    distributions: dict[str, BaseDistribution]
    text: str

    def spec_values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's parameters as ModelSpec values (a tuple choice is stored as "16,32")."""
        return {k: _spec_value(k, v) for k, v in params.items()}


def parse_space(text: str) -> Space:
    """Parse ``text`` (see the module doc); ``ValidationFailed`` with one line otherwise."""
    items = text.split()
    if not items:
        raise ValidationFailed("--space is empty: give KEY=VALUES items, e.g. "
                               "'learning_rate=log:1e-4:1e-2 batch_size=32,64'")
    dists: dict[str, BaseDistribution] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key or not raw:
            raise ValidationFailed(f"--space item {item!r} is not KEY=VALUES")
        if key not in SEARCHABLE:
            raise ValidationFailed(f"--space: {key!r} is not a searchable hyperparameter: use "
                                   f"one of {', '.join(SEARCHABLE)}")
        if key in dists:
            raise ValidationFailed(f"--space: {key!r} is given twice")
        dists[key] = _distribution(key, raw)
    return Space(dists, " ".join(items))


def _distribution(key: str, raw: str) -> BaseDistribution:
    where = f"--space {key}={raw}"
    if _is_tuple(key):
        choices: list[Choice] = [c.strip() for c in raw.split("|")]
        if any(not c for c in choices):
            raise ValidationFailed(f"{where}: an empty choice")
        for c in choices:
            _check(key, _spec_value(key, c), where)
        return CategoricalDistribution(_unique(choices, where))
    if ":" in raw:
        return _range(key, raw, where)
    values = [_scalar(v.strip()) for v in raw.split(",")]
    if any(v == "" for v in values):
        raise ValidationFailed(f"{where}: an empty choice")
    for v in values:
        _check(key, v, where)
    return CategoricalDistribution(_unique(values, where))


def _range(key: str, raw: str, where: str) -> BaseDistribution:
    parts = raw.split(":")
    log = parts[0] == "log"
    if log:
        parts = parts[1:]
    if len(parts) != 2:
        raise ValidationFailed(f"{where}: a range is LOW:HIGH or log:LOW:HIGH")
    lo, hi = (_scalar(p) for p in parts)
    if isinstance(lo, str) or isinstance(hi, str):
        raise ValidationFailed(f"{where}: the bounds of a range must be numbers")
    if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise ValidationFailed(f"{where}: the low bound must be below the high bound")
    if log and lo <= 0:
        raise ValidationFailed(f"{where}: a log range needs a low bound above 0")
    _check(key, lo, where)
    _check(key, hi, where)
    if _is_int(key):
        if not (float(lo).is_integer() and float(hi).is_integer()):
            raise ValidationFailed(f"{where}: {key} takes whole numbers")
        return IntDistribution(int(lo), int(hi), log=log)
    return FloatDistribution(float(lo), float(hi), log=log)


def _unique(values: list[Choice], where: str) -> tuple[Choice, ...]:
    if len(set(values)) != len(values):
        raise ValidationFailed(f"{where}: a choice is listed twice")
    return tuple(values)


def _scalar(text: str) -> Choice:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _field_types(key: str) -> tuple[Any, ...]:
    ann = ModelSpec.model_fields[key].annotation
    return (ann, *get_args(ann))


def _is_tuple(key: str) -> bool:
    return any(getattr(t, "__origin__", t) is tuple for t in _field_types(key))


def _is_int(key: str) -> bool:
    return int in _field_types(key) and float not in _field_types(key)


def spec_value(key: str, value: Any) -> Any:
    """A value for ModelSpec field ``key``; a tuple field's text "16,32" becomes [16, 32]."""
    return _spec_value(key, value) if key in ModelSpec.model_fields else value


def _spec_value(key: str, value: Any) -> Any:
    if _is_tuple(key) and isinstance(value, str):
        try:
            return [int(v) for v in value.split(",")]
        except ValueError:
            raise ValidationFailed(f"--space {key}: {value!r} is not comma-separated "
                                   "integers") from None
    return value


def _check(key: str, value: Any, where: str) -> None:
    try:
        ModelSpec.model_validate({key: value})
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        raise ValidationFailed(f"{where}: {value!r} is not a valid {key}: {msg}") from None
