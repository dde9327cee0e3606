"""Headrace's producer defaults on Apache Kafka's default topic limit (max.message.bytes
1,048,588): a burst of small records is batched under it, so none is refused. (Tansu does not
enforce the limit; with 4 MiB batches Kafka refused every record of a 40,000-record burst with
MSG_SIZE_TOO_LARGE, and the lineage index test read nothing back.)"""

from __future__ import annotations

from typing import Any

import pytest

from headrace.streams.clients import KafkaConnection, make_producer
from tests.fixtures import read_all
from tools.kafka_cluster import KafkaCluster

pytestmark = [pytest.mark.kafka]
RECORDS = 40_000


def test_a_burst_of_small_records_is_never_refused_for_its_batch_size(
        kafka_cluster: KafkaCluster, conn: KafkaConnection,
        topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    p = make_producer(conn)
    errors: dict[str, int] = {}

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[err.str()] = errors.get(err.str(), 0) + 1

    value = b"x" * 150
    for i in range(RECORDS):
        while True:
            try:
                p.produce(topic, value, b"k%d" % i, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors
    assert len(read_all(conn, topic)) == RECORDS
