"""Reading an operator's input file with a one-line ``ConfigError`` instead of a traceback."""

from __future__ import annotations

from pathlib import Path

from headrace.core.errors import ConfigError


def read_config_text(path: Path, *, what: str) -> str:
    """The file's text; ``ConfigError`` naming ``what`` ("cluster file") if it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
