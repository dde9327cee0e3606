"""A consumed batch holding an error event beside good messages (what a zombie scorer's consumer
returns on Apache Kafka once its group session timed out): the good messages are kept, the
error logged, a fatal one raised as FatalError -- never a crash of the list's comparison."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from headrace.core.errors import FatalError
from headrace.streams.consuming import from_messages


def msg(offset: int, error: KafkaError | None = None) -> Message:
    return Message(topic="t", partition=0, offset=offset, value=b"v%d" % offset, key=b"k",
                   error=error)


def test_an_error_event_after_good_messages_is_skipped_and_they_are_kept() -> None:
    batch = from_messages([msg(1), msg(2, KafkaError(KafkaError._TRANSPORT)), msg(3)])
    assert batch.values == [b"v1", b"v3"] and batch.offsets.tolist() == [1, 3]


def test_a_fatal_error_event_among_good_messages_is_a_fatal_error() -> None:
    with pytest.raises(FatalError, match="consumer failed"):
        from_messages([msg(1), msg(2, KafkaError(KafkaError._FENCED, fatal=True))])
