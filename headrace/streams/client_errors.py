"""The one classification of Kafka client errors: consumer error events, delivery reports and
failed client calls, each retriable, permanent or fatal (``headrace.core.errors``).

* **ignore** -- informational events (partition EOF): nothing failed.
* **retriable** -- the client recovers by itself (broker down, leader moved, a topic or partition
  gone for now, "partition count changed"): log it (rate-limited) and carry on.
* **permanent** -- this message's own fault (too large, an invalid record): producing it again
  fails the same way; its cause is dead-lettered.
* **fatal** -- this client instance cannot go on (``err.fatal()``: a fenced or out-of-order
  idempotent producer, a fenced static member): rebuild it or exit non-zero.

Every error list is walked with ``is None`` tests only: ``KafkaError.__eq__(None)`` raises
(``[KafkaError(...), None].count(None)`` is a ``SystemError``), so nothing here compares a
``KafkaError`` to ``None`` with ``==``, ``in``, ``count`` or ``index``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from headrace.core.errors import FatalError, HeadraceError, PermanentError, RetriableError
from headrace.core.rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)


class Kind(enum.Enum):
    IGNORE = "ignore"
    RETRIABLE = "retriable"
    PERMANENT = "permanent"
    FATAL = "fatal"


# Events that are not failures.
_INFORMATIONAL = frozenset({KafkaError._PARTITION_EOF})

# A produced message's own fault: producing it again fails the same way.
MESSAGE_REFUSED = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
                             KafkaError.INVALID_RECORD})

# A delivery error that ends this producer instance although librdkafka does not flag it fatal:
# a broker that lost its producer state (the embedded broker after a restart) answered an
# idempotent producer so, and the same instance retried it for ever. Apache Kafka sends it only
# to a transactional producer a newer one fenced, which is fatal anyway. The codes librdkafka
# recovers from itself (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH) stay retriable.
PRODUCER_ENDED = frozenset({KafkaError.PRODUCER_FENCED})


# A topic or partition the broker does not know: gone (deleted, a broker that lost its data) or
# not created yet. Retriable; a client that owns the topic may create it again.
MISSING_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                           KafkaError._UNKNOWN_PARTITION})


def is_missing_topic(err: KafkaError | None) -> bool:
    return err is not None and err.code() in MISSING_TOPIC


def kind_of(err: KafkaError | None, *, producing: bool = False) -> Kind:
    """How to treat ``err`` (a consumer error event, or a delivery error with ``producing``)."""
    if err is None:
        return Kind.IGNORE
    if err.fatal():
        return Kind.FATAL
    code = err.code()
    if code in _INFORMATIONAL:
        return Kind.IGNORE
    if producing and code in MESSAGE_REFUSED:
        return Kind.PERMANENT
    if producing and code in PRODUCER_ENDED:
        return Kind.FATAL  # renewed when idempotent, an exit when transactional
    # Everything else a consumer reports (unknown topic or partition, a partition count that
    # changed, transport, all brokers down, leader moved) is retried by librdkafka itself.
    return Kind.RETRIABLE


def error_of(exc: KafkaException | BaseException) -> KafkaError | None:
    err = exc.args[0] if exc.args else None
    return err if isinstance(err, KafkaError) else None


def reason(exc: KafkaException) -> str:
    """The broker's or client's one-line reason for a failed call."""
    err = error_of(exc)
    return err.str() if err is not None else str(exc)


def classify(exc: KafkaException, what: str) -> HeadraceError:
    """A failed client call: fatal -> ``FatalError`` (the process cannot go on with this
    client); anything else is retriable."""
    err = error_of(exc)
    if err is not None and err.fatal():
        return FatalError(f"{what} failed: {err.str()}")
    return RetriableError(f"{what} failed: {reason(exc)}")


def as_headrace(exc: BaseException, what: str) -> HeadraceError:
    """Any exception as the taxonomy's: a ``HeadraceError`` as it is, a client's by
    ``classify`` (fatal or retriable), anything else (a bug met on this input) permanent, so
    the input is dead-lettered with the reason instead of killing the loop that met it."""
    if isinstance(exc, HeadraceError):
        return exc
    if isinstance(exc, KafkaException):
        return classify(exc, what)
    return PermanentError(f"{what}: unexpected {type(exc).__name__}: {exc}")


# One line per error code per 30 s: a broker down for a minute is a few lines, not one per poll.
_consumer_log = RateLimitedLog(log, every_s=30.0)


def log_retriable(what: str, err: KafkaError, lines: RateLimitedLog = _consumer_log) -> bool:
    """Log a retriable error event, rate-limited by its code; True if a line was written."""
    return lines.warning(err.code(), "%s: %s (%s; the client retries)", what, err.str(),
                         err.name())


def good_messages(msgs: Sequence[Any], *, what: str = "consumer",
                  on_error: Callable[[KafkaError], object] | None = None) -> list[Any]:
    """The consumed messages that carry a record: error events dropped after classification
    (EOF ignored, retriable logged once in a while, fatal raised as ``FatalError``).
    ``on_error``: sees each non-informational error event first (e.g. to count it)."""
    out: list[Any] = []
    append = out.append
    error = Message.error
    for m in msgs:
        err = error(m)
        if err is None:
            append(m)
            continue
        check_event(err, what=what, on_error=on_error)
    return out


def check_event(err: KafkaError, *, what: str = "consumer",
                on_error: Callable[[KafkaError], object] | None = None) -> Kind:
    """Classify one error event; raise ``FatalError`` if it is fatal, log it if retriable."""
    k = kind_of(err)
    if k is Kind.IGNORE:
        return k
    if on_error is not None:
        on_error(err)
    if k is Kind.FATAL:
        raise FatalError(f"{what} failed: {err.str()} ({err.name()})")
    log_retriable(what, err)
    return k


def fatal_in(errors: Sequence[KafkaError | None]) -> KafkaError | None:
    """The first fatal error among ``errors`` (delivery reports), if any."""
    for err in errors:
        if err is not None and kind_of(err, producing=True) is Kind.FATAL:
            return err
    return None
