"""A scorer's producer and Headrace's consumers never auto-create a topic (D42).

A broker that auto-creates (Tansu always does for a producer's metadata request; Apache Kafka
with ``auto.create.topics.enable``, its default) gives the topic its default partition count
(4 on Tansu) and no config: after a broker restart that lost its data, a scorer's producer
created ``predictions.<stream>`` and the compacted ``control.lineage`` with 4 partitions and no
compaction before anything created them as Headrace means them to be.
"""

from __future__ import annotations

import time
import uuid

import pytest

from headrace.core.errors import ConfigError
from headrace.scorers.engine.stream_io import SCORER_PRODUCER
from headrace.streams.clients import KafkaConnection, list_topics, make_consumer
from headrace.streams.producing import BatchProducer, FlushTimedOut


def test_a_scorers_producer_does_not_create_the_topic_it_produces_to(
        conn: KafkaConnection) -> None:
    topic = f"gone-{uuid.uuid4().hex[:8]}"
    producer = BatchProducer(conn, **{**SCORER_PRODUCER, "message.timeout.ms": 1500})
    try:
        producer.produce(topic, b"v", b"k")
        with pytest.raises(FlushTimedOut) as held:
            producer.flush(1.0)  # held: the topic does not exist
        # The error says where the held messages go and that the topic is missing.
        assert f"not on the cluster: {topic}," in str(held.value), held.value
        assert topic not in list_topics(conn)
    finally:
        producer.producer.purge()


def test_a_headrace_consumer_does_not_create_the_topic_it_subscribes_to(
        conn: KafkaConnection) -> None:
    topic = f"gone-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(conn, f"g-{topic}")
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            consumer.poll(0.2)
        assert topic not in list_topics(conn)
    finally:
        consumer.close()


def test_an_operator_cannot_turn_auto_creation_back_on() -> None:
    with pytest.raises(ConfigError, match=r"allow\.auto\.create\.topics is set by Headrace"):
        KafkaConnection(bootstrap="127.0.0.1:1", extra={"allow.auto.create.topics": "true"})
