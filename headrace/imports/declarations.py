"""What the user declares about a model that does not say it itself: ``--input`` (an input's
kind, and for kinds that need it its columns or shape) and ``--labels`` (class names in output
order).

``--input NAME:KIND`` or ``NAME:KIND=SPEC``: for ``numeric`` SPEC is the record fields
(``a,b,c``: the columns, in model order); for ``tensor`` and ``image`` the per-row shape
(``28x28x1``); ``category`` and ``text`` need none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headrace.core.errors import ValidationFailed

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class Declared:
    name: str
    kind: str
    columns: tuple[str, ...] = ()
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Declarations:
    inputs: tuple[Declared, ...] = ()
    labels: tuple[str, ...] = ()

    def input(self, name: str) -> Declared | None:
        return next((d for d in self.inputs if d.name == name), None)


def parse_input(text: str) -> Declared:
    name, sep, rest = text.partition(":")
    if not sep or not rest or not _NAME.match(name):
        raise ValidationFailed(f"--input {text!r}: write NAME:KIND or NAME:KIND=SPEC "
                               f"(numeric=a,b,c; tensor=4 or image=28x28x1)")
    kind, _, spec = rest.partition("=")
    columns: tuple[str, ...] = ()
    shape: tuple[int, ...] = ()
    if kind == "numeric":
        columns = tuple(c.strip() for c in spec.split(",") if c.strip()) if spec else (name,)
        bad = [c for c in columns if not _NAME.match(c)]
        if bad:
            raise ValidationFailed(f"--input {text!r}: {bad[0]!r} is not a column name")
    elif spec:
        try:
            shape = tuple(int(s) for s in spec.lower().split("x"))
        except ValueError:
            raise ValidationFailed(f"--input {text!r}: the shape {spec!r} is not like "
                                   f"28x28x1") from None
        if any(s < 1 for s in shape):
            raise ValidationFailed(f"--input {text!r}: every dimension must be at least 1")
    return Declared(name=name, kind=kind, columns=columns, shape=shape)


def parse_labels(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    labels = tuple(s.strip() for s in text.split(","))
    if any(not s for s in labels) or len(set(labels)) != len(labels):
        raise ValidationFailed(f"--labels {text!r}: class names, comma-separated, each once")
    return labels


def declarations(inputs: list[str] | tuple[str, ...], labels: str | None) -> Declarations:
    parsed = tuple(parse_input(t) for t in inputs)
    names = [d.name for d in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValidationFailed(f"--input {twice[0]} is declared twice")
    return Declarations(inputs=parsed, labels=parse_labels(labels))
