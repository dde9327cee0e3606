"""Closing a producer that was fenced (a zombie transactional scorer on Apache Kafka) logs what
it could not deliver instead of raising over the error the process exits for."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import BatchProducer


class FencedProducer:
    def flush(self, timeout: float) -> int:
        raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance",
                                        fatal=True))


def test_closing_a_fenced_producer_logs_instead_of_raising(
        caplog: pytest.LogCaptureFixture) -> None:
    p = BatchProducer(KafkaConnection("127.0.0.1:1"), transactional_id="t-zombie")
    p.producer = FencedProducer()  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="headrace.streams.producing"):
        p.close(1.0)
    assert "fenced by a newer instance" in caplog.text
