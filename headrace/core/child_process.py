"""A child process that dies with its parent: a broker, API server or etcd started for a test or
a local stack must never outlive the process that started it (a killed pytest or launcher)."""

from __future__ import annotations

import contextlib
import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: the kernel sends the child SIGKILL when its parent exits (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
