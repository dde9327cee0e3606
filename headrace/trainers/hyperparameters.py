"""``-p KEY=VALUE`` on the way into a request: a family model takes the keys of its row in the
family table (ModelSpec fields; an unknown key is refused with one line listing the valid ones),
your own code takes any key (into ``hyperparameters``, which ``build`` receives; the training
loop's own keys, such as ``learning_rate``, also set the spec). Nothing given is overwritten:
an option and a ``-p`` naming the same key must agree."""

from __future__ import annotations

from collections.abc import Mapping

from headrace.contracts.families import TABLE, TRAINING_HYPERPARAMETERS
from headrace.core.errors import ValidationFailed

Scalar = float | int | str | bool
# Spec fields that hold a tuple: ``-p filters=32,64``.
_TUPLES = ("hidden", "filters", "image_size")


def split_params(model: str | None, params: Mapping[str, object],
                 options: Mapping[str, object]) -> tuple[dict[str, object], dict[str, Scalar]]:
    """(spec fields, code hyperparameters) for ``model`` (a family name, or None for code).
    ``options``: what dedicated options set (``--batch-size``...), None where not given."""
    given = {k: v for k, v in options.items() if v is not None}
    for key, value in params.items():
        if key in given and _scalar(_text(value)) != _scalar(_text(given[key])):
            raise ValidationFailed(f"-p {key}={_text(value)} contradicts --{key.replace('_', '-')}"
                                   f" {_text(given[key])}: give it once")
    if model is None:  # your code: every key reaches build(); the loop's keys set the spec too
        hyper = {k: _scalar(v) for k, v in params.items()}
        spec = {k: _spec_value(k, v) for k, v in params.items() if k in TRAINING_HYPERPARAMETERS}
        return {**spec, **given}, hyper
    if model not in TABLE:  # ModelSpec refuses it, naming the families
        return {**{k: _spec_value(k, v) for k, v in params.items()}, **given}, {}
    valid = TABLE[model].valid_hyperparameters()
    for key in params:
        if key not in valid:
            raise ValidationFailed(f"-p {key}: not a hyperparameter of model {model}; valid: "
                                   f"{', '.join(valid)}")
    return {**{k: _spec_value(k, v) for k, v in params.items()}, **given}, {}


def _spec_value(key: str, value: object) -> object:
    if isinstance(value, str) and (key in _TUPLES or "," in value):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, tuple):
        return list(value)
    return value


def _scalar(value: object) -> Scalar:
    """A code hyperparameter as typed as its text allows: bool, int, float, else the text."""
    if isinstance(value, bool | int | float):
        return value
    text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def _text(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
