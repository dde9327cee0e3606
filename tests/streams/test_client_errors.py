"""Kafka client errors classified in one place (``streams.client_errors``), with real
``confluent_kafka.KafkaError`` and ``Message`` objects; and the readers and producers that use it.

The defect: ``_columns`` did ``errors.count(None)`` and ``KafkaError.__eq__(None)`` raises, so any
error event in a consumed batch ("partition count changed", UNKNOWN_TOPIC_OR_PART) killed the
scorer with ``SystemError``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from headrace.contracts import JobEvent, JobEventKind
from headrace.core.errors import FatalError, PermanentError, RetriableError
from headrace.core.rate_limited_log import RateLimitedLog
from headrace.streams import client_errors
from headrace.streams.client_errors import Kind, good_messages, kind_of, log_retriable
from headrace.streams.clients import KafkaConnection
from headrace.streams.consuming import from_messages
from headrace.streams.producing import BatchProducer, EventSink, ProducerRenewed, delivery_failure
from tests.fixtures import read_topic


def msg(offset: int, value: bytes | None = b"v", error: KafkaError | None = None) -> Any:
    return Message(topic="t", partition=0, offset=offset, key=b"k", value=value, error=error,
                   timestamp=(1, 1000 + offset))


def test_the_old_count_of_none_over_an_error_list_is_a_system_error() -> None:
    # What _columns did: documents why nothing may compare a KafkaError to None.
    with pytest.raises(SystemError):
        [KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), None].count(None)


@pytest.mark.parametrize(("err", "producing", "kind"), [
    (None, False, Kind.IGNORE),
    (KafkaError(KafkaError._PARTITION_EOF), False, Kind.IGNORE),
    (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), False, Kind.RETRIABLE),
    (KafkaError(KafkaError._UNKNOWN_PARTITION, "Partition count changed from 3 to 0"), False,
     Kind.RETRIABLE),
    (KafkaError(KafkaError._TRANSPORT), False, Kind.RETRIABLE),
    (KafkaError(KafkaError._ALL_BROKERS_DOWN), False, Kind.RETRIABLE),
    (KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), True, Kind.RETRIABLE),
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), True, Kind.PERMANENT),
    (KafkaError(KafkaError.INVALID_RECORD), True, Kind.PERMANENT),
    (KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "oos", fatal=True), True, Kind.FATAL),
    (KafkaError(KafkaError._FENCED, "fenced", fatal=True), True, Kind.FATAL),
    (KafkaError(KafkaError.FENCED_INSTANCE_ID, "static member fenced", fatal=True), False,
     Kind.FATAL),
    # Fatal wins over a code that would otherwise be permanent or informational.
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "x", fatal=True), True, Kind.FATAL),
])
def test_every_error_has_one_kind(err: KafkaError | None, producing: bool, kind: Kind) -> None:
    assert kind_of(err, producing=producing) is kind


def test_a_batch_with_an_error_event_keeps_its_records_instead_of_raising(
        caplog: pytest.LogCaptureFixture) -> None:
    bad = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    msgs = [msg(0), msg(-1, None, bad), msg(1), msg(2, None, KafkaError(KafkaError._PARTITION_EOF))]
    with caplog.at_level(logging.WARNING, "headrace.streams.client_errors"):
        batch = from_messages(msgs)  # was: SystemError from errors.count(None)
    assert batch.offsets.tolist() == [0, 1]
    assert batch.values == [b"v", b"v"]
    assert "Unknown topic or partition" in caplog.text


def test_a_fatal_consumer_event_is_fatal() -> None:
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced by a newer member", fatal=True)
    with pytest.raises(FatalError, match="fenced by a newer member"):
        from_messages([msg(0), msg(-1, None, fenced)])


def test_retriable_events_are_logged_once_a_while_not_per_poll(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t.rl"), every_s=30.0, clock=lambda: now[0])
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN)
    with caplog.at_level(logging.WARNING, "t.rl"):
        said = [log_retriable("consumer", down, limited) for _ in range(100)]
        now[0] = 31.0
        said.append(log_retriable("consumer", down, limited))
    assert said.count(True) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "99 more like it" in lines[1]


def test_good_messages_counts_each_failure() -> None:
    seen: list[str] = []
    errs = [KafkaError(KafkaError._TRANSPORT), KafkaError(KafkaError._PARTITION_EOF)]
    out = good_messages([msg(0), msg(-1, None, errs[0]), msg(-1, None, errs[1])],
                        on_error=lambda e: seen.append(e.name()))
    assert [m.offset() for m in out] == [0]
    assert seen == ["_TRANSPORT"]  # EOF is no failure


def test_delivery_failures_are_fatal_if_any_is() -> None:
    errors = [KafkaError(KafkaError._MSG_TIMED_OUT),
              KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "oos", fatal=True)]
    assert isinstance(delivery_failure(errors), FatalError)  # not only when it comes first
    assert isinstance(delivery_failure(errors[:1]), RetriableError)


NO_MESSAGE: Any = None  # a delivery error of these codes never reads its message


def _unreachable() -> KafkaConnection:
    """A connection nothing listens on: a producer is built, and flushes nothing, offline."""
    return KafkaConnection(bootstrap="127.0.0.1:9", timeout_s=1.0)


def test_a_producer_fenced_delivery_error_renews_an_idempotent_producer() -> None:
    """D32: a restarted (memory) broker answered the scorer's idempotent producer with
    PRODUCER_FENCED, which librdkafka does not flag fatal: the worker retried the same instance
    every 5 s for ever. The delivery error now renews a non-transactional producer."""
    fenced = KafkaError(KafkaError.PRODUCER_FENCED)  # as a delivery report gives it
    assert not fenced.fatal() and kind_of(fenced, producing=True) is Kind.FATAL
    assert kind_of(fenced) is Kind.RETRIABLE  # a consumer event of that code is not ours
    # The codes librdkafka recovers from itself (epoch bump) stay retriable.
    for code in (KafkaError.UNKNOWN_PRODUCER_ID, KafkaError.INVALID_PRODUCER_EPOCH):
        assert kind_of(KafkaError(code), producing=True) is Kind.RETRIABLE
    p = BatchProducer(_unreachable())
    old = p.producer
    for err in (KafkaError(KafkaError._MSG_TIMED_OUT), fenced):
        p.deliveries(err, NO_MESSAGE)  # as librdkafka reports them
    with pytest.raises(ProducerRenewed, match="PRODUCER_FENCED"):
        p.flush(1.0)  # was: DeliveryFailed, and the same fenced instance produced again
    assert p.producer is not old
    p.flush(1.0)  # the new producer holds no failure


def test_a_producer_fenced_delivery_error_ends_a_transactional_producer() -> None:
    p = BatchProducer(_unreachable(), transactional_id="t-fenced")
    p.deliveries(KafkaError(KafkaError.PRODUCER_FENCED), NO_MESSAGE)
    with pytest.raises(FatalError, match="PRODUCER_FENCED"):
        p.flush(1.0)  # its fencing is the point: the process exits, never renews


class _CrashingFlush:
    """A producer whose flush fails inside the client, as a fatal error met during a flush did
    after a broker restart: ``SystemError: ... returned NULL without setting an exception``."""

    def flush(self, *args: Any) -> int:
        raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL without "
                          "setting an exception")

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: 0


def test_a_flush_that_fails_inside_the_client_renews_the_producer(conn: KafkaConnection) -> None:
    p = BatchProducer(conn)
    crashing = p.producer = _CrashingFlush()
    with pytest.raises(ProducerRenewed, match="inside the client"):
        p.flush(5.0)  # the caller publishes the batch again, on a new producer
    assert p.producer is not crashing
    p.flush(5.0)


def test_classify_a_failed_call() -> None:
    fatal = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    assert isinstance(client_errors.classify(fatal, "commit"), FatalError)
    assert isinstance(client_errors.classify(KafkaException(KafkaError(KafkaError._TRANSPORT)),
                                             "commit"), RetriableError)


def test_any_exception_becomes_one_of_the_three() -> None:
    fatal = KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "oos", fatal=True))
    assert isinstance(client_errors.as_headrace(fatal, "route"), FatalError)
    transient = KafkaException(KafkaError(KafkaError._TRANSPORT))
    assert isinstance(client_errors.as_headrace(transient, "route"), RetriableError)
    bug = client_errors.as_headrace(KeyError("x"), "route")
    assert isinstance(bug, PermanentError) and "unexpected KeyError" in str(bug)
    mine = RetriableError("dfs hiccup")
    assert client_errors.as_headrace(mine, "route") is mine


class _FencedProducer:
    """A producer whose instance failed fatally: every produce raises, as librdkafka's does."""

    def __init__(self) -> None:
        self.calls = 0

    def produce(self, *args: Any, **kw: Any) -> None:
        self.calls += 1
        raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        "Broker: Out of order sequence number", fatal=True))

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: 0  # purge, poll, flush: nothing held


def test_a_fatal_produce_renews_the_producer_and_the_flush_says_so(conn: KafkaConnection,
                                                                   topic_factory: Any) -> None:
    topic = topic_factory()
    p = BatchProducer(conn)
    fenced = p.producer = _FencedProducer()
    refused = p.produce_many(topic, [b"a", b"b"], [None, None], [])
    assert refused == [] and fenced.calls == 1
    assert p.producer is not fenced  # a new producer took the rest
    with pytest.raises(ProducerRenewed, match="OUT_OF_ORDER_SEQUENCE_NUMBER"):
        p.flush(10.0)  # the caller must produce everything since the last flush again
    p.produce_many(topic, [b"a", b"b"], [None, None], [])
    p.flush(10.0)  # the new producer works, and the flag is cleared
    assert {m.value() for m in read_topic(conn, topic, expect=2)} == {b"a", b"b"}


class _FatalOnPoll:
    """A producer that took the messages, then failed fatally: the client raises the
    instance's fatal error from ``poll`` and ``flush`` (seen after a broker restart: a
    scorer exited 1 on it from ``produce_many``)."""

    def __init__(self) -> None:
        self.produced = 0

    def produce(self, *args: Any, **kw: Any) -> None:
        self.produced += 1

    def _fatal(self, *args: Any, **kw: Any) -> int:
        raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        "sequence desynchronization with broker", fatal=True))

    poll = flush = _fatal

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: 0


def test_a_fatal_error_raised_from_poll_renews_the_producer(conn: KafkaConnection,
                                                            topic_factory: Any) -> None:
    topic = topic_factory()
    p = BatchProducer(conn)
    failed = p.producer = _FatalOnPoll()
    assert p.produce_many(topic, [b"a", b"b"], [None, None], []) == []
    assert failed.produced == 2 and p.producer is not failed
    with pytest.raises(ProducerRenewed, match="OUT_OF_ORDER_SEQUENCE_NUMBER"):
        p.flush(10.0)  # the caller must produce everything since the last flush again
    p.produce_many(topic, [b"a", b"b"], [None, None], [])
    p.flush(10.0)
    assert {m.value() for m in read_topic(conn, topic, expect=2)} == {b"a", b"b"}


def test_a_fatal_error_raised_from_flush_renews_the_producer(conn: KafkaConnection) -> None:
    p = BatchProducer(conn)
    failed = p.producer = _FatalOnPoll()
    with pytest.raises(ProducerRenewed, match="sequence desynchronization"):
        p.flush(5.0)
    assert p.producer is not failed
    p.flush(5.0)


def test_a_fatal_error_from_a_transactional_producers_poll_is_fatal(
        conn: KafkaConnection) -> None:
    p = BatchProducer(conn)
    p.transactional = True
    p.producer = _FatalOnPoll()
    with pytest.raises(FatalError, match="desynchronization"):
        p.produce_many("t", [b"a"], [None], [])


def test_a_fatal_single_produce_renews_too(conn: KafkaConnection, topic_factory: Any) -> None:
    topic = topic_factory()
    p = BatchProducer(conn)
    p.producer = _FencedProducer()
    p.produce(topic, b"one")  # replay, redrive, send: was a raw KafkaException
    with pytest.raises(ProducerRenewed):
        p.flush(10.0)
    assert [m.value() for m in read_topic(conn, topic, expect=1)] == [b"one"]


def test_a_fatal_transactional_produce_is_fatal(conn: KafkaConnection) -> None:
    p = BatchProducer(conn)
    p.transactional = True
    p.producer = _FencedProducer()
    with pytest.raises(FatalError, match="Out of order"):
        p.produce_many("t", [b"a"], [None], [])


def test_an_event_sink_whose_producer_is_fenced_sends_with_a_new_one(
        conn: KafkaConnection, topic_factory: Any) -> None:
    topic = topic_factory()
    sink = EventSink(conn)
    sink._producer.producer = _FencedProducer()  # the control plane's QUEUED event, say
    event = JobEvent(job_id="j1", kind=JobEventKind.QUEUED, model_name="m")
    sink.send(topic, event, key="j1")  # was: KafkaException out of the routing agent
    [rec] = read_topic(conn, topic, expect=1)
    assert JobEvent.model_validate_json(rec.value()).job_id == "j1"
    sink.close()
