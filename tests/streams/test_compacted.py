"""The one reader of compacted topics: the latest record per key, a tombstone removes its key,
and the table is the same whether the log cleaner has run or not; no bytes kill it.

The unit cases fold records in directly; the broker cases write the records to real topics
(the history as written, and the same history as compaction leaves it) and read them back
through ``read_latest``. Compaction itself on Apache Kafka, under the readers that use this
table, is tests/faults/kafka/test_compaction_recovery.py.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from headrace.contracts import RolloutRole, RolloutState
from headrace.core.bad_records import BadRecords
from headrace.streams.clients import KafkaConnection, make_producer
from headrace.streams.compacted import Latest, read_latest
from headrace.streams.reading import Record

log = logging.getLogger(__name__)

Write = tuple[bytes | None, bytes | None]  # key, value (None: a tombstone)


def state(stream: str, version: int | None) -> bytes:
    role = RolloutRole.SHADOW if version is not None else None
    return RolloutState(stream=stream, model_name="m", candidate_version=version, role=role,
                        reason=f"v{version}").to_bytes()


# Each key written over several times; "b" removed by a tombstone and never written again, "c"
# removed and written again, "d" rewritten with garbage last (compaction keeps that garbage, so
# "d" holds no value either way).
HISTORY: list[Write] = [
    (b"a", state("a", 1)), (b"b", state("b", 1)), (b"c", state("c", 1)), (b"d", state("d", 1)),
    (b"a", state("a", 2)), (b"b", None), (b"c", None), (b"a", state("a", 3)),
    (b"c", state("c", 4)), (b"d", b"\xff{not json"),
]


def compacted(history: list[Write], *, keep_tombstones: bool) -> list[Write]:
    """What the log cleaner leaves: each key's last record, in offset order; a tombstone only
    until ``delete.retention.ms`` has passed."""
    last = {key: i for i, (key, _) in enumerate(history)}
    return [(k, v) for i, (k, v) in enumerate(history)
            if last[k] == i and (v is not None or keep_tombstones)]


def table(writes: list[Write]) -> Latest[RolloutState]:
    latest = Latest(RolloutState, BadRecords(log, "rollout state"))
    for offset, (key, value) in enumerate(writes):
        latest.take(Record("t", 0, offset, key, value))
    return latest


def streams_of(t: dict[bytes, RolloutState]) -> dict[bytes, int | None]:
    return {k: v.candidate_version for k, v in t.items()}


def test_a_tombstone_removes_its_key() -> None:
    latest = table([(b"a", state("a", 1)), (b"b", state("b", 1)), (b"a", None)])
    assert streams_of(latest.table()) == {b"b": 1}
    assert latest.take(Record("t", 0, 3, b"a", None)) is False  # already gone: no change
    assert latest.take(Record("t", 0, 4, b"a", state("a", 5))) is True  # written again
    assert streams_of(latest.table()) == {b"a": 5, b"b": 1}


def test_a_key_rewritten_across_a_compaction_keeps_only_its_latest() -> None:
    want = {b"a": 3, b"c": 4}
    before = table(HISTORY)
    assert streams_of(before.table()) == want
    for keep in (True, False):
        after = table(compacted(HISTORY, keep_tombstones=keep))
        assert streams_of(after.table()) == want, keep


def test_undecodable_bytes_are_counted_and_the_reader_goes_on() -> None:
    poison: list[Write] = [(b"a", b""), (b"a", b"\x00" * 50), (b"a", b"[" * 100_000),
                           (b"a", b'{"stream": null}'), (b"a", "\u00e9".encode("latin-1")),
                           (None, state("a", 9)), (b"\xff\xfe", b"{")]
    latest = table([(b"a", state("a", 1)), (b"b", state("b", 1)), *poison])
    assert streams_of(latest.table()) == {b"b": 1}  # a's latest record is unreadable
    assert latest.bad.count == 6  # every one with a key; the keyless record is no part of it
    assert latest.take(Record("t", 0, 99, b"a", state("a", 2))) is True
    assert streams_of(latest.table()) == {b"a": 2, b"b": 1}
    assert latest.read == 3


def test_keep_and_newer_choose_keys_and_refuse_an_older_value() -> None:
    latest = Latest(RolloutState, BadRecords(log, "rollout state"),
                    keep=lambda k: k.startswith(b"a"),
                    newer=lambda old, new: (new.candidate_version or 0)
                    >= (old.candidate_version or 0))
    for offset, (key, value) in enumerate([(b"a1", state("a1", 3)), (b"b1", state("b1", 1)),
                                           (b"a1", state("a1", 2)), (b"a2", b"\xff")]):
        latest.take(Record("t", 0, offset, key, value))
    assert streams_of(latest.table()) == {b"a1": 3}  # b1 not kept; an older a1 refused
    assert latest.bad.count == 1  # a2's bytes


def _write(conn: KafkaConnection, topic: str, writes: list[Write]) -> None:
    p = make_producer(conn)
    for key, value in writes:
        p.produce(topic, key=key, value=value)
    assert p.flush(10) == 0


def test_the_broker_holds_the_same_table_before_and_after_compaction(
        conn: KafkaConnection, topic_factory: Callable[..., str]) -> None:
    full, cleaned = topic_factory(partitions=1), topic_factory(partitions=1)
    _write(conn, full, HISTORY)
    _write(conn, cleaned, compacted(HISTORY, keep_tombstones=False))
    bad = BadRecords(log, "rollout state")
    got_full = read_latest(conn, full, RolloutState, bad=bad)
    got_cleaned = read_latest(conn, cleaned, RolloutState)
    assert streams_of(got_full) == streams_of(got_cleaned) == {b"a": 3, b"c": 4}
    assert got_full[b"a"].reason == "v3"
    assert bad.count == 1  # d's garbage, read from the broker and counted


def test_a_topic_not_created_yet_is_an_empty_table(conn: KafkaConnection) -> None:
    assert read_latest(conn, f"t-missing-{uuid.uuid4().hex[:12]}", RolloutState) == {}
