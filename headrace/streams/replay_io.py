"""Kafka helpers for operations: range reads, true end offsets, timestamp lookups, copying.

Only ``headrace.streams`` talks to confluent-kafka; ``headrace.ops`` (replay, DLQ redrive,
dashboard) uses these helpers.

End bounds. The high watermark alone is not trusted: on the embedded broker (Tansu) it is the
*base* offset + 1 of the last multi-record batch. :func:`probe_ends` takes the watermark as a
lower bound, reads from just below it until the consumer reports partition EOF
(``enable.partition.eof``), and returns ``max(high, last offset read + 1)``. On a real Kafka the
probe reads at most one record per partition.

Timestamps. ``offsets_for_times`` is used as a hint only: Tansu answers the log start for every
timestamp. :func:`first_offsets_at` verifies the hint by reading and scans forward to the first
record whose timestamp is >= the target (Kafka's own semantics), so the answer is exact on both.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from headrace.core.errors import BrokerUnavailable, FatalError, RetriableError
from headrace.streams.clients import KafkaConnection, make_admin, make_consumer, make_producer

# Headers added to every replayed record (a replay of a replay replaces them). Two only: each
# header costs throughput (measured: 6 headers ran at ~0.65x pass-through, 2 at ~0.8x). The
# origin topic is in the replay's checkpoint (ops/replays/<replay-id>.json) and the origin
# partition is the same number, so replay-id + origin offset identify the source record.
REPLAY_ID = "replay-id"
REPLAY_ORIGIN_OFFSET = "replay-origin-offset"
REDRIVE_ID = "redrive-id"
REDRIVE_DLQ_OFFSET = "redrive-dlq-offset"  # "<dlq partition>:<dlq offset>"

_EOF = KafkaError._PARTITION_EOF
_READ_CONF: dict[str, Any] = {"enable.partition.eof": True, "isolation.level": "read_uncommitted"}


@dataclass(frozen=True)
class Record:
    """A consumed record as plain data (for the slow paths: DLQ, resume scans, dashboard)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None

    @classmethod
    def of(cls, m: Any) -> Record:
        ts_type, ts = m.timestamp()
        return cls(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                   tuple((k, v or b"") for k, v in (m.headers() or ())),
                   ts if ts_type != 0 else None)

    def header(self, name: str) -> str | None:
        value = None
        for k, v in self.headers:
            if k == name:
                value = v.decode("utf-8", "replace")
        return value


def _consume(c: Consumer, n: int, timeout_s: float) -> list[Any]:
    return list(c.consume(n, timeout_s))


def _reader(conn: KafkaConnection, purpose: str) -> Consumer:
    # A throwaway group id: librdkafka wants one, but nothing here ever commits.
    return make_consumer(conn, f"headrace-ops.{purpose}.{uuid.uuid4().hex[:8]}", **_READ_CONF)


def partition_count(conn: KafkaConnection, topic: str) -> int | None:
    """Number of partitions, or None if the topic does not exist."""
    try:
        # All topics, not ``topic=``: a metadata request naming a topic may auto-create it.
        md = make_admin(conn).list_topics(timeout=conn.timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(f"Kafka at {conn.bootstrap} did not answer: {exc}") from None
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return len(t.partitions)


def watermarks(
    conn: KafkaConnection, topic: str, partitions: Iterable[int]
) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) as the broker reports them (high may be low on Tansu)."""
    c = _reader(conn, "wm")
    try:
        return {p: _wm(c, topic, p, conn.timeout_s) for p in partitions}
    finally:
        c.close()


def _wm(c: Consumer, topic: str, p: int, timeout_s: float) -> tuple[int, int]:
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot read offsets of {topic}[{p}]: {exc}") from None
    return int(low), int(high)


def probe_ends(
    conn: KafkaConnection, topic: str, partitions: Iterable[int], *, timeout_s: float = 10.0
) -> dict[int, tuple[int, int]]:
    """partition -> (low, end): end is one past the last record, verified by reading to EOF."""
    parts = list(partitions)
    c = _reader(conn, "probe")
    try:
        marks = {p: _wm(c, topic, p, conn.timeout_s) for p in parts}
        ends = {p: hi for p, (_, hi) in marks.items()}
        pending = {p for p, (lo, hi) in marks.items() if hi > lo}
        if pending:
            c.assign([TopicPartition(topic, p, max(marks[p][0], marks[p][1] - 1)) for p in pending])
            deadline = time.monotonic() + timeout_s
            while pending and time.monotonic() < deadline:
                for m in _consume(c, 10_000, 0.2):
                    err = m.error()
                    if err is None:
                        ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
                    elif err.code() == _EOF:
                        ends[m.partition()] = max(ends[m.partition()], m.offset())
                        pending.discard(m.partition())
            # A partition that never reported EOF is still bounded by what was read (a busy
            # topic): the end is a snapshot, never a moving target.
        return {p: (marks[p][0], ends[p]) for p in parts}
    finally:
        c.close()


def offsets_for_times_hint(
    conn: KafkaConnection, topic: str, times: Mapping[int, int]
) -> dict[int, int]:
    """partition -> broker's offset for the timestamp (-1: none at or after it). A hint only."""
    c = _reader(conn, "oft")
    try:
        res = c.offsets_for_times([TopicPartition(topic, p, ts) for p, ts in times.items()],
                                  timeout=conn.timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(f"offsets_for_times on {topic} failed: {exc}") from None
    finally:
        c.close()
    return {tp.partition: int(tp.offset) for tp in res}


def first_offsets_at(
    conn: KafkaConnection,
    topic: str,
    bounds: Mapping[int, tuple[int, int]],
    times: Iterable[int],
) -> dict[int, list[int]]:
    """For each partition (low, end) and each timestamp T (ascending): the first offset in
    [low, end) whose record timestamp is >= T, or ``end`` if none. Exact: verified by reading."""
    ts_list = sorted(times)
    out: dict[int, list[int]] = {}
    parts = [p for p, (lo, end) in bounds.items() if end > lo]
    for p, (lo, end) in bounds.items():
        if end <= lo:
            out[p] = [end] * len(ts_list)
    if not parts:
        return out
    # The hint for the earliest timestamp is where reading starts; anything later is found by
    # reading forward. A hint that is not verifiably at or before the answer is dropped.
    hints = offsets_for_times_hint(conn, topic, {p: ts_list[0] for p in parts})
    starts = {p: _start_from_hint(conn, topic, p, bounds[p], hints.get(p, -1), ts_list[0])
              for p in parts}
    c = _reader(conn, "times")
    try:
        c.assign([TopicPartition(topic, p, starts[p]) for p in parts])
        found: dict[int, list[int]] = {p: [] for p in parts}
        pending = set(parts)
        while pending:
            msgs = _consume(c, 10_000, 1.0)
            if not msgs:
                continue
            for m in msgs:
                p = m.partition()
                if p not in pending:
                    continue
                err = m.error()
                lo, end = bounds[p]
                if err is not None:
                    if err.code() == _EOF:
                        pending.discard(p)
                    continue
                if m.offset() >= end:
                    pending.discard(p)
                    continue
                ts = m.timestamp()[1]
                while len(found[p]) < len(ts_list) and ts >= ts_list[len(found[p])]:
                    found[p].append(m.offset())
                if len(found[p]) == len(ts_list):
                    pending.discard(p)
        for p in parts:
            out[p] = found[p] + [bounds[p][1]] * (len(ts_list) - len(found[p]))
        return out
    finally:
        c.close()


def _start_from_hint(
    conn: KafkaConnection, topic: str, p: int, bounds: tuple[int, int], hint: int, ts: int
) -> int:
    lo, end = bounds
    if hint < 0:
        hint = end  # the broker says nothing at or after ts; verify the record before it
    hint = min(max(hint, lo), end)
    if hint == lo:
        return lo
    before = read_one(conn, topic, p, hint - 1)
    if before is not None and before.timestamp_ms is not None and before.timestamp_ms < ts:
        return hint  # the record just before is earlier: the answer is at or after the hint
    return lo  # not verifiable: read from the start


def read_one(conn: KafkaConnection, topic: str, partition: int, offset: int,
             *, timeout_s: float = 10.0) -> Record | None:
    recs = read_range(conn, topic, {partition: (offset, offset + 1)}, timeout_s=timeout_s)
    return recs[0] if recs and recs[0].offset == offset else None


def read_range(
    conn: KafkaConnection, topic: str, ranges: Mapping[int, tuple[int, int]],
    *, limit: int | None = None, timeout_s: float = 30.0,
) -> list[Record]:
    """Every record in ``[start, end)`` of each partition, as plain data (small ranges only)."""
    out: list[Record] = []
    with RangeReader(conn, topic, ranges, purpose="read") as reader:
        deadline = time.monotonic() + timeout_s
        while not reader.done and time.monotonic() < deadline:
            out.extend(Record.of(m) for m in reader.poll(10_000, 0.5))
            if limit is not None and len(out) >= limit:
                return out[:limit]
    return out


@dataclass
class RangeReader:
    """Reads ``[start, end)`` per partition by assignment (no group membership, no commits).

    ``positions[p]`` is the next offset to read. A partition is done when its position reaches
    its end, or when it reports EOF (then nothing at or below ``end`` is left: ``end`` was
    captured earlier, so the partition's current end is at or past it).
    """

    conn: KafkaConnection
    topic: str
    ranges: Mapping[int, tuple[int, int]]
    purpose: str = "replay"
    positions: dict[int, int] = field(default_factory=dict)
    eof_grace_s: float = 3.0
    _consumer: Consumer | None = None
    _pending: set[int] = field(default_factory=set)
    _eof_at: dict[int, float] = field(default_factory=dict)

    def __enter__(self) -> RangeReader:
        self.positions = {p: s for p, (s, _) in self.ranges.items()}
        active = [p for p, (s, e) in self.ranges.items() if s < e]
        self._pending = set(active)
        self._consumer = _reader(self.conn, self.purpose)
        if active:
            self._consumer.assign(
                [TopicPartition(self.topic, p, self.positions[p]) for p in active])
        return self

    def __exit__(self, *exc: object) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @property
    def done(self) -> bool:
        return not self._pending

    def poll(self, max_messages: int, timeout_s: float) -> list[Any]:
        """The next in-range messages (possibly none), in offset order per partition."""
        assert self._consumer is not None
        if not self._pending:
            return []
        try:
            msgs = _consume(self._consumer, max_messages, timeout_s)
        except KafkaException as exc:
            raise RetriableError(f"reading {self.topic} failed: {exc}") from None
        out: list[Any] = []
        finished: list[int] = []
        ranges = self.ranges
        pos = self.positions
        for m in msgs:
            err = m.error()
            p = m.partition()
            if err is not None:
                if err.code() == _EOF:
                    if p in self._pending:
                        if m.offset() >= ranges[p][1]:
                            pos[p] = ranges[p][1]
                            finished.append(p)
                        else:  # fewer records than the captured end: confirm it stays so
                            self._eof_at.setdefault(p, time.monotonic())
                    continue
                if err.retriable() or err.code() == KafkaError._TRANSPORT:
                    continue
                raise FatalError(f"reading {self.topic}[{p}]: {err.str()}")
            o = m.offset()
            end = ranges[p][1]
            if o >= end or p not in self._pending:
                if p in self._pending:
                    pos[p] = end
                    finished.append(p)
                continue
            out.append(m)
            pos[p] = o + 1
            if o + 1 >= end:
                finished.append(p)
        if self._eof_at:
            now = time.monotonic()
            got = {m.partition() for m in out}
            for p, since in list(self._eof_at.items()):
                if p in got:
                    del self._eof_at[p]
                elif now - since > self.eof_grace_s:
                    # Offsets below the end that never come (deleted or control records).
                    pos[p] = ranges[p][1]
                    finished.append(p)
                    del self._eof_at[p]
        if finished:
            done = {p for p in finished if p in self._pending}
            self._pending -= done
            if done:
                self._consumer.incremental_unassign(
                    [TopicPartition(self.topic, p) for p in sorted(done)])
        return out


class AckTracker:
    """Delivery callback: counts acks, remembers the first error and the highest offset acked
    per partition (where a resume scan of the target may start)."""

    def __init__(self) -> None:
        self.acked = 0
        self.error: KafkaError | None = None
        self.max_offset: dict[int, int] = {}

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
            return
        self.acked += 1
        p, o = msg.partition(), msg.offset()
        if o is not None and o >= 0 and o > self.max_offset.get(p, -1):
            self.max_offset[p] = o


class Copier:
    """Produces consumed messages to ``target`` (same partition number), same key, value and
    headers, plus ``replay-id`` and ``replay-origin-offset``; the timestamp is the time of the
    copy unless ``keep_timestamps`` (old timestamps can fall under the target's retention).
    ``flush`` returns only when every record is acknowledged."""

    def __init__(self, conn: KafkaConnection, target: str, *, replay_id: str,
                 keep_timestamps: bool = False, **producer_overrides: Any) -> None:
        self.target = target
        self.replay_id = replay_id.encode()
        self.keep_timestamps = keep_timestamps
        self.tracker = AckTracker()
        self.producer: Producer = make_producer(conn, **producer_overrides)
        self._fixed: dict[int, list[tuple[str, bytes]]] = {}

    def copy(self, msgs: list[Any]) -> int:
        produce, poll = self.producer.produce, self.producer.poll
        target, cb, keep = self.target, self.tracker, self.keep_timestamps
        fixed = self._fixed
        for m in msgs:
            hs = m.headers()
            hs = [h for h in hs if not h[0].startswith("replay-")] if hs else []
            p = m.partition()
            const = fixed.get(p)
            if const is None:
                const = fixed[p] = self._fixed_headers(m.topic(), p)
            hs.extend(const)
            hs.append((REPLAY_ORIGIN_OFFSET, b"%d" % m.offset()))
            ts_type, ts = m.timestamp()
            while True:
                try:
                    if keep and ts_type:
                        produce(target, m.value(), m.key(), partition=p, on_delivery=cb,
                                timestamp=ts, headers=hs)
                    else:
                        produce(target, m.value(), m.key(), partition=p, on_delivery=cb,
                                headers=hs)
                    break
                except BufferError:
                    poll(0.05)
        poll(0)
        return len(msgs)

    def _fixed_headers(self, topic: str, partition: int) -> list[tuple[str, bytes]]:
        return [(REPLAY_ID, self.replay_id)]

    def flush(self, *, timeout_s: float) -> None:
        flush_tracked(self.producer, self.tracker, timeout_s=timeout_s)


def flush_tracked(producer: Producer, tracker: AckTracker, *, timeout_s: float) -> None:
    remaining = producer.flush(timeout_s)
    if tracker.error is not None:
        err, tracker.error = tracker.error, None
        raise (RetriableError if err.retriable() else FatalError)(f"delivery failed: {err.str()}")
    if remaining:
        raise RetriableError(f"{remaining} records not acknowledged within {timeout_s:.0f}s")


def new_producer(conn: KafkaConnection, **overrides: Any) -> Producer:
    return make_producer(conn, **overrides)


def produce_raw(producer: Producer, topic: str, value: bytes | None, *, key: bytes | None,
                headers: list[tuple[str, bytes]], partition: int | None,
                on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
    kwargs: dict[str, Any] = {"key": key, "headers": headers}
    if partition is not None:
        kwargs["partition"] = partition
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def message_fields(m: Any) -> tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """(partition, offset, key, value, headers) of a consumed message."""
    return m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or ())


def scan_headers(
    conn: KafkaConnection, topic: str, starts: Mapping[int, int], *, match: Mapping[str, str],
    collect: str, timeout_s: float = 60.0,
) -> dict[int, list[str]]:
    """From ``starts[p]`` to the verified end of each partition: the values of header
    ``collect`` on every record whose headers include all of ``match``."""
    bounds = probe_ends(conn, topic, starts)
    ranges = {p: (min(max(s, bounds[p][0]), bounds[p][1]), bounds[p][1]) for p, s in starts.items()}
    out: dict[int, list[str]] = {p: [] for p in starts}
    want = {k: v.encode() for k, v in match.items()}
    with RangeReader(conn, topic, ranges, purpose="scan") as reader:
        deadline = time.monotonic() + timeout_s
        while not reader.done:
            if time.monotonic() > deadline:
                raise RetriableError(f"scanning {topic} did not finish within {timeout_s:.0f}s")
            for m in reader.poll(10_000, 0.5):
                hs = dict(m.headers() or ())
                if all(hs.get(k) == v for k, v in want.items()) and collect in hs:
                    out[m.partition()].append((hs[collect] or b"").decode())
    return out


def iter_batches(reader: RangeReader, *, max_messages: int = 10_000,
                 timeout_s: float = 0.5) -> Iterator[list[Any]]:
    while not reader.done:
        yield reader.poll(max_messages, timeout_s)


class Follower:
    """Follows topics from their beginning (or end), by assignment: no group, no commits.
    ``poll`` returns plain records; a topic that does not exist yet is picked up later."""

    def __init__(self, conn: KafkaConnection, topics: Iterable[str], *,
                 from_beginning: bool = True) -> None:
        self.conn = conn
        self.wanted = list(topics)
        self.from_beginning = from_beginning
        self._assigned: set[str] = set()
        self._consumer = _reader(conn, "follow")
        self._next_check = 0.0

    def _assign_new(self) -> None:
        now = time.monotonic()
        if now < self._next_check or len(self._assigned) == len(self.wanted):
            return
        self._next_check = now + 2.0
        for t in self.wanted:
            if t in self._assigned:
                continue
            n = partition_count(self.conn, t)
            if n:
                start = OFFSET_BEGINNING if self.from_beginning else OFFSET_END
                self._consumer.incremental_assign([TopicPartition(t, p, start) for p in range(n)])
                self._assigned.add(t)

    def poll(self, timeout_s: float = 0.5, max_messages: int = 5000) -> list[Record]:
        self._assign_new()
        if not self._assigned:
            time.sleep(timeout_s)
            return []
        try:
            msgs = _consume(self._consumer, max_messages, timeout_s)
        except KafkaException:
            return []
        return [Record.of(m) for m in msgs if m.error() is None]

    def close(self) -> None:
        self._consumer.close()
