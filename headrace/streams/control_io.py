"""Kafka helpers for the training control plane (confluent-kafka): publish events, read them back.

The job process, the CLI and the control plane use these; the faust app is in ``control.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from headrace.core.errors import RecordRef
from headrace.streams.clients import (
    DeliveryTracker,
    KafkaConnection,
    flush_or_raise,
    make_consumer,
    make_producer,
    partitions_of,
    publish,
)
from headrace.streams.contracts import Contract, parse
from headrace.streams.dlq import DeadLetter, write_dead_letter

C = TypeVar("C", bound=Contract)


class EventSink:
    """A producer for low-volume contract events; ``send`` waits for the acknowledgement."""

    def __init__(self, conn: KafkaConnection) -> None:
        self._conn = conn
        # linger 0: control events are few and latency matters (job start, promotion).
        self._producer = make_producer(conn, **{"linger.ms": 0})
        self._tracker = DeliveryTracker()

    def send(self, topic: str, event: Contract, *, key: str | None = None,
             wait: bool = True) -> None:
        publish(self._producer, topic, event, key=key, on_delivery=self._tracker)
        if wait:
            self.flush()
        else:
            self._producer.poll(0)

    def dead_letter(self, topic: str, record: RecordRef, exc: BaseException, *,
                    stage: str) -> None:
        write_dead_letter(self._producer, topic, DeadLetter.from_error(record, exc, stage=stage),
                          on_delivery=self._tracker)
        self.flush()

    def flush(self) -> None:
        flush_or_raise(self._producer, self._tracker, timeout_s=self._conn.timeout_s)

    def close(self) -> None:
        self._producer.flush(self._conn.timeout_s)


@dataclass(frozen=True)
class Received:
    record: RecordRef

    def header(self, name: str) -> str | None:
        for k, v in self.record.headers:
            if k == name:
                return v.decode("utf-8", "replace")
        return None


def _start_offsets(consumer: Any, topic: str, parts: list[int], since_ms: int | None
                   ) -> list[TopicPartition]:
    if since_ms is None:
        return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts]
    found = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in parts],
                                       timeout=10.0)
    return [TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            for tp in found]


def iter_records(
    conn: KafkaConnection, topic: str, *, since_ms: int | None = None,
    idle_s: float = 1.0, follow: bool = False, stop: Callable[[], bool] | None = None,
) -> Iterator[Received]:
    """Every record of ``topic`` (from ``since_ms``): until ``idle_s`` without a new one, or,
    with ``follow``, until ``stop()`` is true. Partitions are assigned (no group, no commits);
    the end is found by idleness because Tansu's high watermark is unreliable."""
    consumer = make_consumer(conn, "headrace-reader", **{"enable.partition.eof": False})
    try:
        parts = partitions_of(conn, topic)
        consumer.assign(_start_offsets(consumer, topic, parts, since_ms))
        last = time.monotonic() + 1.0  # the first fetch after an assignment takes a while
        while True:
            if stop is not None and stop():
                return
            msgs = consumer.consume(500, timeout=0.1)
            for m in msgs:
                if m.error() is not None:
                    continue  # partition EOF and transient fetch errors
                last = time.monotonic()
                raw: Any = m.headers() or []
                headers = tuple((str(k), v if isinstance(v, bytes) else str(v or "").encode())
                                for k, v in raw)
                yield Received(RecordRef(
                    topic=str(m.topic()), partition=int(m.partition() or 0),
                    offset=int(m.offset() or 0), key=m.key(), value=m.value(),
                    headers=headers, timestamp_ms=m.timestamp()[1]))
            if not follow and not msgs and time.monotonic() - last > idle_s:
                return
    finally:
        consumer.close()


def read_events(conn: KafkaConnection, topic: str, model: type[C], *,
                since_ms: int | None = None, idle_s: float = 1.0) -> list[C]:
    """The parseable contract events of ``topic`` (others are skipped)."""
    out: list[C] = []
    for rec in iter_records(conn, topic, since_ms=since_ms, idle_s=idle_s):
        try:
            out.append(parse(model, rec.record.value or b""))
        except Exception:
            continue
    return out
