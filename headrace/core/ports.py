"""Binding a listening port with an error that names the port and the setting that moves it,
and choosing free loopback ports for the processes Headrace starts (one home for both)."""

from __future__ import annotations

import errno
import socket
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


LOOPBACK = "127.0.0.1"


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct free ports on ``host`` (held open together while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = LOOPBACK) -> int:
    """One free port on ``host``."""
    return free_ports(1, host)[0]
