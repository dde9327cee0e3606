"""Binding a listening port with an error that names the port and the setting that moves it."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TypeVar

from headrace.core.errors import ConfigError

T = TypeVar("T")


def bind(make: Callable[[], T], *, host: str, port: int, setting: str) -> T:
    """``make()`` (which binds ``host:port``); a port in use becomes a one-line ``ConfigError``
    naming the port and ``setting`` instead of ``[Errno 98] Address already in use``."""
    try:
        return make()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is already in use; choose another with "
                              f"{setting} (0 picks a free one)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"cannot listen on {host}: no such local address ({setting})"
                              ) from None
        raise
