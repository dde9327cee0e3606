"""The transaction calls' error classes on fake clients and an injected clock: sending offsets
is retried with backoff until the deadline; txn_requires_abort -> aborted, the consumer rewound,
``TransactionAborted``; a commit that timed out is never retried: the producer is recreated
and initialised before the rewind; anything else -> ``FatalError``. On a real coordinator:
``tests/faults/kafka/test_uncertain_commit.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from headrace.core.errors import FatalError, RetriableError
from headrace.streams import transactions
from headrace.streams.transactions import TransactionAborted, Transactions, _retry

RETRIABLE = KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow coordinator", retriable=True))
ABORT = KafkaException(KafkaError(KafkaError._STATE, "epoch bumped", txn_requires_abort=True))
FATAL = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))


class FakeProducer:
    """A transactional producer whose calls fail as scripted, then succeed."""

    def __init__(self, **fail: list[KafkaException]) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def _do(self, name: str) -> None:
        self.calls.append(name)
        queue = self.fail.get(name)
        if queue:
            raise queue.pop(0)

    def init_transactions(self, timeout: float) -> None:
        self._do("init")

    def begin_transaction(self) -> None:
        self._do("begin")

    def send_offsets_to_transaction(self, tps: Any, meta: Any, timeout: float) -> None:
        self.calls.append(f"offsets {sorted((t.topic, t.partition, t.offset) for t in tps)}")
        self._do("offsets")

    def commit_transaction(self, timeout: float) -> None:
        self._do("commit")

    def abort_transaction(self, timeout: float) -> None:
        self._do("abort")


class FakeConsumer:
    def __init__(self, log: list[str] | None = None) -> None:
        self.rewound = 0
        self.held = 0
        self.log = log if log is not None else []
        self.taken: set[tuple[str, int]] = set()
        self.consumer = SimpleNamespace(consumer_group_metadata=lambda: "group-meta")

    def rewind_to_committed(self, timeout_s: float) -> None:
        self.rewound += 1
        self.log.append("rewind")

    def hold(self) -> None:
        self.held += 1

    def release(self) -> None:
        pass

    def taken_since(self, tps: Any, consumed_at: int) -> list[tuple[str, int]]:
        return sorted(tp for tp in tps if tp in self.taken)


class FakeDeliveries:
    def __init__(self) -> None:
        self.taken = 0

    def take(self) -> list[KafkaError]:
        self.taken += 1
        return []


class FakeBatchProducer:
    """``BatchProducer``'s part the transactions use; ``recreate`` starts a new instance."""

    def __init__(self, producer: FakeProducer, deliveries: FakeDeliveries,
                 timeout_s: float, then: list[FakeProducer]) -> None:
        self.producer = producer
        self.deliveries = deliveries
        self.conn = SimpleNamespace(timeout_s=timeout_s)
        self.then = then
        self.flushed = 0

    def flush(self, timeout_s: float, *, keep: Any = None) -> None:
        self.flushed += 1

    def recreate(self) -> None:
        self.producer.calls.append("recreated")
        self.producer = self.then.pop(0)


def _txn(monkeypatch: pytest.MonkeyPatch, producer: FakeProducer, timeout_s: float = 5.0,
         then: list[FakeProducer] | None = None
         ) -> tuple[Transactions, FakeConsumer, FakeDeliveries]:
    monkeypatch.setattr(transactions.time, "sleep", lambda s: None)  # backoff without waiting
    deliveries, consumer = FakeDeliveries(), FakeConsumer()
    batch = FakeBatchProducer(producer, deliveries, timeout_s, then or [])
    return Transactions(batch, consumer), consumer, deliveries  # type: ignore[arg-type]


def test_a_commit_sends_the_batch_offsets_retrying_what_is_retriable_then_commits_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    p = FakeProducer(offsets=[RETRIABLE])
    txn, consumer, deliveries = _txn(monkeypatch, p)
    txn.begin()
    txn.commit({("t", 1): 10, ("t", 0): 7}, timeout_s=5.0)
    assert p.calls == ["init", "begin", "offsets [('t', 0, 7), ('t', 1, 10)]", "offsets",
                       "offsets [('t', 0, 7), ('t', 1, 10)]", "offsets", "commit"]
    assert deliveries.taken == 1 and consumer.rewound == 0
    assert consumer.held >= 1  # the retry's wait kept the consumer in its group


def test_a_timed_out_commit_is_never_retried_the_producer_is_recreated_then_rewound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The outcome is unknown: the old producer is dropped, a new one is initialised (which
    settles the old transaction at the coordinator) and only then is the consumer rewound."""
    log: list[str] = []
    p = FakeProducer(commit=[RETRIABLE])
    fresh = FakeProducer(init=[RETRIABLE])  # the new init itself waits once
    fresh.calls = log
    txn, consumer, _ = _txn(monkeypatch, p, then=[fresh])
    consumer.log = log
    txn.begin()
    with pytest.raises(TransactionAborted, match="commit outcome unknown"):
        txn.commit({("t", 0): 3}, timeout_s=5.0)
    assert p.calls.count("commit") == 1 and p.calls[-2:] == ["abort", "recreated"]
    assert log == ["init", "init", "rewind"] and txn.recreated == 1
    txn.begin()  # the new producer is ready: no init again
    assert log[-1] == "begin" and log.count("init") == 2


def test_a_recreated_producer_not_yet_initialised_is_initialised_before_the_next_begin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator is still away: the batch is dropped (rewound); the next begin inits,
    rewinds again (now the old transaction is settled) and drops the batch in hand too."""
    p = FakeProducer(commit=[RETRIABLE])
    fresh = FakeProducer(init=[RETRIABLE] * 50)
    txn, consumer, _ = _txn(monkeypatch, p, timeout_s=0.0, then=[fresh])
    with pytest.raises(TransactionAborted, match="not initialised yet"):
        txn.commit({("t", 0): 3}, timeout_s=5.0)
    assert consumer.rewound == 1
    fresh.fail["init"] = []
    with pytest.raises(TransactionAborted, match="producer recreated"):
        txn.begin()
    assert consumer.rewound == 2 and "begin" not in fresh.calls
    txn.begin()
    assert fresh.calls[-1] == "begin"


def test_a_batch_with_a_partition_taken_away_since_it_was_consumed_is_aborted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    p = FakeProducer()
    txn, consumer, _ = _txn(monkeypatch, p)
    consumer.taken = {("t", 1)}
    with pytest.raises(TransactionAborted, match=r"t\[1\] taken away"):
        txn.commit({("t", 0): 3, ("t", 1): 5}, timeout_s=5.0, consumed_at=0)
    assert "commit" not in p.calls and not any(c.startswith("offsets") for c in p.calls)
    assert p.calls[-1] == "abort" and consumer.rewound == 1


def test_a_commit_with_no_offsets_only_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    p = FakeProducer()
    txn, _, _ = _txn(monkeypatch, p)
    txn.commit({}, timeout_s=5.0)
    assert p.calls == ["init", "commit"]


def test_an_abortable_commit_aborts_rewinds_and_asks_for_the_batch_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    p = FakeProducer(commit=[ABORT])
    txn, consumer, deliveries = _txn(monkeypatch, p)
    with pytest.raises(TransactionAborted, match="epoch bumped") as raised:
        txn.commit({("t", 0): 3}, timeout_s=5.0)
    assert isinstance(raised.value, RetriableError)
    assert p.calls[-2:] == ["commit", "abort"]
    assert consumer.rewound == 1 and deliveries.taken == 1  # the aborted batch's reports dropped


def test_any_other_commit_failure_is_fatal_and_nothing_is_rewound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    p = FakeProducer(offsets=[FATAL])
    txn, consumer, _ = _txn(monkeypatch, p)
    with pytest.raises(FatalError, match="transaction failed"):
        txn.commit({("t", 0): 3}, timeout_s=5.0)
    assert "commit" not in p.calls and consumer.rewound == 0


def test_init_begin_and_abort_failures_are_fatal_naming_the_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FatalError, match="transaction init failed"):
        _txn(monkeypatch, FakeProducer(init=[FATAL]))
    txn, _, _ = _txn(monkeypatch, FakeProducer(begin=[ABORT]))
    with pytest.raises(FatalError, match="transaction begin failed"):
        txn.begin()
    txn, consumer, _ = _txn(monkeypatch, FakeProducer(abort=[FATAL]))
    with pytest.raises(FatalError, match="transaction abort failed"):
        txn.abort_and_rewind(5.0)
    assert consumer.rewound == 0  # never rewound past an abort that did not happen


def test_retry_backs_off_doubling_to_a_second_and_gives_up_at_its_deadline() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    calls = [0]

    def always_retriable() -> None:
        calls[0] += 1
        raise RETRIABLE

    with pytest.raises(KafkaException):
        _retry(always_retriable, 5.0, clock=lambda: now[0], sleep=sleep)
    assert slept[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0] and max(slept) == 1.0
    assert now[0] >= 5.0 and sum(slept[:-1]) < 5.0 and calls[0] == len(slept) + 1


def test_retry_raises_a_non_retriable_error_at_once() -> None:
    slept: list[float] = []

    def not_retriable() -> None:
        raise FATAL

    with pytest.raises(KafkaException):
        _retry(not_retriable, 5.0, sleep=slept.append)
    assert slept == []
