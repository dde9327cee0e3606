"""One line for a pydantic validation error: where the first bad field is and what is wrong."""

from __future__ import annotations

from pydantic import ValidationError


def first_error(exc: ValidationError, *, root: str, count_more: bool = False) -> str:
    """``loc: msg`` of the first error (``root`` when it is the whole value); with
    ``count_more``, `` (+N more)`` when there are others."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or root
    n = exc.error_count()
    more = f" (+{n - 1} more)" if count_more and n > 1 else ""
    return f"{loc}: {err['msg']}{more}"
