"""Reading topics without a consumer group: range reads, true end offsets, timestamp lookups,
followers, and the one record type (``Record``) for every path that is not the scorer's.

Replay, DLQ redrive, the dashboard, the demo and the control plane's readers use these.

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
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from headrace.contracts import Contract, parse
from headrace.core.errors import BrokerUnavailable, FatalError, RecordRef, RetriableError
from headrace.streams.client_errors import check_event, good_messages
from headrace.streams.clients import KafkaConnection, make_consumer, partition_count, partitions_of

C = TypeVar("C", bound=Contract)

_EOF = KafkaError._PARTITION_EOF
_READ_CONF: dict[str, Any] = {"enable.partition.eof": True, "isolation.level": "read_uncommitted"}


Record = RecordRef  # the one record type: where a record came from, and its bytes


def record_of(m: Any) -> Record:
    """A consumed message as plain data (for the slow paths: DLQ, resume scans, dashboard)."""
    ts_type, ts = m.timestamp()
    return Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                  tuple((k, v or b"") for k, v in (m.headers() or ())),
                  ts if ts_type != 0 else None)


def _consume(c: Consumer, n: int, timeout_s: float) -> list[Any]:
    return list(c.consume(n, timeout_s))


def _reader(conn: KafkaConnection, purpose: str) -> Consumer:
    # A throwaway group id: librdkafka wants one, but nothing here ever commits.
    return make_consumer(conn, f"headrace-ops.{purpose}.{uuid.uuid4().hex[:8]}", **_READ_CONF)


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
                    else:
                        check_event(err, what=f"reading {topic}")  # fatal raises
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
                    else:
                        check_event(err, what=f"reading {topic}")  # fatal raises
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
            out.extend(record_of(m) for m in reader.poll(10_000, 0.5))
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
                check_event(err, what=f"reading {self.topic}[{p}]")  # fatal raises
                continue
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
                    out[m.partition()].append((hs[collect] or b"").decode("utf-8", "replace"))
    return out


def read_to_end(conn: KafkaConnection, topic: str, *, purpose: str = "read",
                timeout_s: float | None = None) -> Iterator[Record]:
    """Every record of ``topic``, each partition from its start to its end now (verified by
    reading: ``probe_ends``); nothing when the topic does not exist yet. A read that does not
    reach the end in ``timeout_s`` (default: the connection's, at least 30 s) is retriable."""
    n = partition_count(conn, topic)
    if not n:
        return
    limit = timeout_s if timeout_s is not None else max(30.0, conn.timeout_s)
    bounds = probe_ends(conn, topic, range(n))
    with RangeReader(conn, topic, dict(bounds), purpose=purpose) as reader:
        deadline = time.monotonic() + limit
        while not reader.done:
            if time.monotonic() > deadline:
                raise RetriableError(f"reading {topic} to its end did not finish in {limit:.0f}s")
            for m in reader.poll(50_000, 0.2):
                yield record_of(m)


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
        self.positions: dict[tuple[str, int], int] = {}  # (topic, partition) -> next offset

    def reached(self, ends: Mapping[tuple[str, int], int]) -> bool:
        """Whether every record before ``ends`` (e.g. from ``follow_ends``) has been read."""
        return all(self.positions.get(tp, 0) >= end for tp, end in ends.items())

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
        for m in msgs:  # EOF: read to the end, past any transaction marker or compacted gap
            err = m.error()
            if err is not None and err.code() == _EOF:
                tp = (m.topic(), m.partition())
                self.positions[tp] = max(self.positions.get(tp, 0), m.offset())
        out = [record_of(m) for m in good_messages(msgs, what="following " + ",".join(
            sorted(self._assigned)))]
        for r in out:
            tp = (r.topic, r.partition)
            self.positions[tp] = max(self.positions.get(tp, 0), r.offset + 1)
        return out

    def close(self) -> None:
        self._consumer.close()


def follow_ends(conn: KafkaConnection, topic: str) -> dict[tuple[str, int], int]:
    """Where ``topic``'s partitions end now, verified by reading (Tansu's high watermark can
    be low): a ``Follower`` that ``reached`` them has read the topic to its end. Empty when
    the topic is missing or cannot be read (the caller falls back to idleness)."""
    try:
        n = partition_count(conn, topic)
        if not n:
            return {}
        return {(topic, p): end for p, (lo, end) in probe_ends(conn, topic, range(n)).items()
                if end > lo}
    except (KafkaException, RetriableError, FatalError):
        return {}


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
) -> Iterator[Record]:
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
            for m in good_messages(msgs, what=f"reading {topic}"):  # fatal raises
                last = time.monotonic()
                yield record_of(m)
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
            out.append(parse(model, rec.value or b""))
        except Exception:
            continue
    return out
