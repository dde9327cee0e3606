"""One line for a file reader's error that never quotes the file: pyarrow quotes the offending
row or cell ("Expected 3 columns, got 2: <the row>", "invalid value '<the cell>'"), and a
refused file's contents must not reach a terminal, a log or a job's reason."""

from __future__ import annotations

import re

_QUOTED = (re.compile(r"(Expected \d+ columns?, got \d+):.*", re.DOTALL),
           re.compile(r"(invalid value) '.*'", re.DOTALL),
           re.compile(r"(straddling object) .*", re.DOTALL))


def without_contents(exc: BaseException) -> str:
    """The first line of ``exc``, with any quoted input cut out."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for pattern in _QUOTED:
        text = pattern.sub(r"\1", text)
    return text[:300]
