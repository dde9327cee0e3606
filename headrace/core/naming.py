"""Safe names for models, streams and jobs, and paths confined to a root.

Names reach the filesystem and Kafka topic names, so they are restricted to a small alphabet:
no path separators, no shell metacharacters, no leading dot.
"""

from __future__ import annotations

import re
from pathlib import Path

from headrace.core.errors import ValidationFailed

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
_NAME_RE = re.compile(NAME_PATTERN)


def check_name(value: str, *, what: str = "name") -> str:
    """Return ``value`` if it is a safe name, else raise ``ValidationFailed``."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValidationFailed(
            f"invalid {what} {value!r}: use 1-63 of a-z 0-9 _ - starting with a letter or digit"
        )
    return value


def confined(root: Path, *parts: str) -> Path:
    """Join ``parts`` under ``root`` and refuse any result that escapes it."""
    base = root.resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and base not in path.parents:
        raise ValidationFailed(f"path {'/'.join(parts)!r} escapes {base}")
    return path
