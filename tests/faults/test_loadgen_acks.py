"""The load generator's acknowledgements: one an idempotent producer reports without an offset
(a retried batch the broker already had: DUPLICATE_SEQUENCE_NUMBER, offset -1001) is still
checked, found by its key in the data topic; one the topic lacks fails the check."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from headrace.streams.clients import KafkaConnection
from tests.faults.harness import DataTopicKeys, LoadGenerator, Stream, new_stream, produce_all


@dataclass
class Delivered:
    """What librdkafka hands a delivery callback."""

    _partition: int
    _offset: int | None
    _key: bytes

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> bytes:
        return self._key


class Located(DataTopicKeys):
    """Where the data topic holds each key, as given."""

    def __init__(self, where: dict[bytes, set[tuple[int, int]]]) -> None:
        self.where = dict(where)
        self.asked: list[set[bytes]] = []

    def locate(self, keys: set[bytes], timeout_s: float) -> dict[bytes, set[tuple[int, int]]]:
        self.asked.append(set(keys))
        return {k: self.where[k] for k in keys if k in self.where}

    def close(self) -> None:
        pass


def loadgen(keys: DataTopicKeys) -> LoadGenerator:
    stream = Stream("sunit")
    # Never started: nothing is produced, no broker is reached.
    return LoadGenerator(KafkaConnection(bootstrap="127.0.0.1:9"), stream, rate=1, total=0,
                         keys=keys)


def test_an_acknowledgement_without_an_offset_is_resolved_by_key() -> None:
    keys = Located({b"2": {(1, 7)}})
    load = loadgen(keys)
    load._ack(None, Delivered(0, 4, b"0"))
    load._ack(None, Delivered(2, 9, b"1"))
    load._ack(None, Delivered(1, None, b"2"))  # what confluent_kafka gives for -1001
    assert load.all_acked() == {(0, 4), (2, 9), (1, 7)}
    assert keys.asked == [{b"2"}]
    # Sorting and arithmetic on every offset work (check() sorts them; tests add 1).
    assert max(o + 1 for _, o in sorted(load.all_acked())) == 10


def test_a_negative_offset_counts_as_unknown_too() -> None:
    load = loadgen(Located({b"5": {(0, 3)}}))
    load._ack(None, Delivered(0, -1001, b"5"))
    assert load.all_acked() == {(0, 3)}


def test_an_acknowledged_record_the_data_topic_lacks_fails_the_check() -> None:
    load = loadgen(Located({}))
    load._ack(None, Delivered(0, None, b"3"))
    with pytest.raises(AssertionError, match=r"not in data\.sunit"):
        load.all_acked(locate_timeout_s=0.1)


def test_the_data_topic_is_read_for_the_keys(conn: KafkaConnection) -> None:
    stream = new_stream(conn, partitions=3)
    acked = produce_all(conn, stream.data, [(f"v{i}".encode(), None) for i in range(9)])
    keys = DataTopicKeys(conn, stream.data)
    try:
        found = keys.locate({b"4", b"8"}, timeout_s=30)
        missing = keys.locate({b"42"}, timeout_s=0.5)
    finally:
        keys.close()
    assert found == {b"4": {acked[4]}, b"8": {acked[8]}}
    assert missing == {}
