"""The error taxonomy.

Every failure is one of three kinds, and each kind has one handling rule:

* ``RetriableError`` -- transient (broker unreachable, DFS hiccup): retry with backoff.
* ``PermanentError`` -- this input will never succeed: route it to a dead-letter topic.
* ``FatalError`` -- the process cannot go on (bad configuration, lost fencing): exit non-zero.

Each error may carry the offending record so that whoever handles it can dead-letter or
report exactly what failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RecordRef:
    """Where a record came from, and its original bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None

    def header(self, name: str) -> str | None:
        """The last value of header ``name``, decoded leniently; None when absent."""
        value = None
        for k, v in self.headers:
            if k == name:
                value = v.decode("utf-8", "replace")
        return value


class HeadraceError(Exception):
    """Root of every error Headrace raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str, *, record: RecordRef | None = None, stage: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.record = record
        self.stage = stage

    def with_record(self, record: RecordRef, stage: str | None = None) -> HeadraceError:
        self.record = record
        if stage is not None:
            self.stage = stage
        return self

    def __str__(self) -> str:
        return self.message


class RetriableError(HeadraceError):
    """A transient fault: the same operation may succeed later."""


class PermanentError(HeadraceError):
    """This input can never succeed; it belongs in a dead-letter topic."""


class FatalError(HeadraceError):
    """The process cannot continue; it exits with ``exit_code``."""

    exit_code = 2


class ConfigError(FatalError):
    """A setting or argument is invalid."""


class BrokerUnavailable(RetriableError):
    """The Kafka cluster did not answer in time."""


class ValidationFailed(PermanentError):
    """A payload does not match its contract."""

    def __init__(self, message: str, *, details: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.details = details
