"""Replay a range of a topic: copy it (same or another topic), or re-score it with a chosen
model version into a side topic.

A copy keeps key, value, headers and the partition number, and adds ``replay-id`` and
``replay-origin-offset`` (the origin topic is in the replay's checkpoint file; the origin
partition is the same number). A re-score writes ``Prediction`` records only
to its side topic; it joins no consumer group and commits nothing, so the live scorers never
notice it.

The loop, per slice of records:

1. Read the next in-range records by assignment (``RangeReader``; no group, no commits).
2. Wait for the rate limit, then produce them (copy) or score and produce predictions.
3. Every ``checkpoint_every_s``: flush -- every record acknowledged -- and only then
   write the checkpoint (see ``replay_checkpoints``). Ctrl-C does the same before exiting.
4. On resume: scan the target from the checkpoint's ``scan_from`` for records with this
   replay id and skip past their origin offsets, so nothing is produced twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from headrace.core.errors import ValidationFailed
from headrace.ops import ranges
from headrace.ops import replay_checkpoints as checkpoints
from headrace.ops.provenance import REPLAY_ID, REPLAY_ORIGIN_OFFSET, REPLAY_PREFIX
from headrace.ops.replay_checkpoints import PartitionProgress, ReplayCheckpoint
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.producing import BatchProducer, Deliveries, produce
from headrace.streams.reading import RangeReader, probe_ends, scan_headers

DEFAULT_BATCH = 10_000


class Sink(Protocol):
    """Where a replay's records go: ``write`` returns the rows written, ``flush`` waits for
    every acknowledgement, ``tracker`` knows the highest target offset acked per partition."""

    tracker: Deliveries

    def write(self, msgs: list[Any]) -> int: ...

    def flush(self, *, timeout_s: float) -> None: ...


class CopySink:
    """Produces consumed messages to the target (same partition number), same key, value and
    headers, plus ``replay-id`` and ``replay-origin-offset``; the timestamp is the time of the
    copy unless ``keep_timestamps`` (old timestamps can fall under the target's retention).
    ``flush`` returns only when every record is acknowledged."""

    def __init__(self, conn: KafkaConnection, cp: ReplayCheckpoint) -> None:
        self.target = cp.target
        self.keep_timestamps = cp.keep_timestamps
        self._producer = BatchProducer(conn)
        self.tracker = self._producer.deliveries
        self._replay_id = [(REPLAY_ID, cp.replay_id.encode())]

    def write(self, msgs: list[Any]) -> int:
        producer = self._producer.producer
        target, keep, fixed = self.target, self.keep_timestamps, self._replay_id
        for m in msgs:
            hs = m.headers()
            hs = [h for h in hs if not h[0].startswith(REPLAY_PREFIX)] if hs else []
            hs += fixed
            hs.append((REPLAY_ORIGIN_OFFSET, b"%d" % m.offset()))
            ts_type, ts = m.timestamp()
            produce(producer, target, m.value(), m.key(), hs, partition=m.partition(),
                    timestamp_ms=ts if keep and ts_type else 0)
        producer.poll(0)
        return len(msgs)

    def flush(self, *, timeout_s: float) -> None:
        self._producer.flush(timeout_s)


@dataclass
class ReplayResult:
    replay_id: str
    records_in: int  # source records read in this run
    rows_out: int  # records (copy) or predictions (re-score) produced in this run
    skipped_on_resume: int  # source records already in the target, found by the resume scan
    elapsed_s: float
    completed: bool
    checkpoint: Path

    @property
    def rows_per_s(self) -> float:
        return self.records_in / self.elapsed_s if self.elapsed_s > 0 else 0.0


class RateLimiter:
    """At most ``rate`` rows a second on average since the start (None: unlimited)."""

    def __init__(self, rate: float | None, *, clock: Any = time.monotonic,
                 sleep: Any = time.sleep) -> None:
        self.rate = rate
        self._clock, self._sleep = clock, sleep
        self._t0 = clock()
        self._sent = 0

    def acquire(self, n: int) -> None:
        if self.rate is None:
            return
        self._sent += n
        ahead = self._sent / self.rate - (self._clock() - self._t0)
        if ahead > 0:
            self._sleep(ahead)


def plan(
    conn: KafkaConnection,
    *,
    source: str,
    into: str | None = None,
    partitions: Sequence[int] = (),
    from_offsets: Sequence[int] = (),
    to_offsets: Sequence[int] = (),
    from_time: str | None = None,
    to_time: str | None = None,
    rate: float | None = None,
    model: str | None = None,
    runtime: str = "tensorflow",
    keep_timestamps: bool = False,
    now_ms: int | None = None,
    replay_id: str | None = None,
) -> ReplayCheckpoint:
    """Validate everything and resolve the ranges; write nothing. Raise ``ValidationFailed``."""
    if rate is not None and rate <= 0:
        raise ValidationFailed(f"--rate must be > 0 rows/s, not {rate:g}")
    by_time = from_time is not None or to_time is not None
    if by_time and (from_offsets or to_offsets):
        raise ValidationFailed("give offsets or times (--from/--to), not both")
    target = into or source
    if model is not None and (into is None or into == source):
        raise ValidationFailed("--model re-scores into a side topic: give --into TOPIC "
                               "(another topic than the source)")
    source_n = ranges.source_partitions(conn, source)
    target_n = partition_count(conn, target)
    if target_n is None:
        raise ValidationFailed(f"target topic {target} does not exist")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if by_time:
        rs = ranges.by_times(
            conn, source, partitions=partitions, now_ms=now,
            from_ms=None if from_time is None else ranges.parse_time(from_time, what="--from"),
            to_ms=None if to_time is None else ranges.parse_time(to_time, what="--to"))
    else:
        rs = ranges.by_offsets(conn, source, partitions=partitions, from_offsets=from_offsets,
                               to_offsets=to_offsets)
    needed = max((r.partition for r in rs if r.count), default=-1) + 1
    if needed > target_n:
        raise ValidationFailed(
            f"target {target} has {target_n} partitions; a replay keeps partition numbers and "
            f"needs {needed} (source {source} has {source_n})")
    scan = probe_ends(conn, target, [r.partition for r in rs if r.count])
    return ReplayCheckpoint(
        replay_id=replay_id or checkpoints.new_replay_id(), source=source, target=target,
        mode="rescore" if model else "copy", model=model, runtime=runtime, rate=rate,
        keep_timestamps=keep_timestamps,
        partitions=[PartitionProgress(partition=r.partition, start=r.start, end=r.end,
                                      next=r.start, scan_from=scan[r.partition][1])
                    for r in rs if r.count],
    )


def describe(cp: ReplayCheckpoint) -> list[str]:
    """What the replay would move (or has left to move), one line per partition."""
    verb = f"re-score with {cp.model}" if cp.mode == "rescore" else "copy"
    lines = [f"replay {cp.replay_id}: {verb} {cp.source} -> {cp.target}"
             + (f" at <= {cp.rate:g} rows/s" if cp.rate else "")]
    for p in cp.partitions:
        lines.append(f"  partition {p.partition}: offsets [{p.next}, {p.end}) -> "
                     f"{p.remaining} records -> {cp.target}[{p.partition}]")
    lines.append(f"  total: {cp.remaining} records")
    return lines


def reconcile(conn: KafkaConnection, cp: ReplayCheckpoint) -> int:
    """Step 4: move ``next`` past records this replay already wrote (acked but not yet
    checkpointed when it stopped). Returns how many source offsets were skipped."""
    open_parts = {p.partition: p for p in cp.partitions if p.remaining}
    if not open_parts:
        return 0
    found = scan_headers(conn, cp.target, {p: pp.scan_from for p, pp in open_parts.items()},
                         match={REPLAY_ID: cp.replay_id},
                         collect=REPLAY_ORIGIN_OFFSET)
    skipped = 0
    for p, offsets in found.items():
        pp = open_parts[p]
        done = [int(o) for o in offsets if o.isdecimal()]
        if done:
            new_next = min(max(pp.next, max(done) + 1), pp.end)
            skipped += new_next - pp.next
            pp.next = new_next
    return skipped


def run(
    conn: KafkaConnection,
    root: Path,
    cp: ReplayCheckpoint,
    *,
    sink: Sink | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    stop_after: int | None = None,
    checkpoint_every_s: float = 1.0,
    batch: int = DEFAULT_BATCH,
    flush_timeout_s: float = 60.0,
) -> ReplayResult:
    """Replay what ``cp`` has left; write the checkpoint as it goes. ``stop_after`` stops
    (cleanly: flushed and checkpointed) after that many source records -- for tests.
    ``on_progress(done, total)`` is called after every slice (the CLI draws a bar from it)."""
    t0 = time.monotonic()
    resuming = checkpoints.checkpoint_path(root, cp.replay_id).exists()
    skipped = reconcile(conn, cp) if resuming else 0
    checkpoints.save(root, cp)
    base_out = cp.records_out
    if sink is None:
        sink = make_sink(conn, root, cp)
    limiter = RateLimiter(cp.rate)
    if cp.rate:
        batch = max(1, min(batch, int(cp.rate / 10) or 1))
    parts = {p.partition: p for p in cp.partitions}
    todo = {p: (pp.next, pp.end) for p, pp in parts.items() if pp.remaining}
    records_in = rows_out = 0
    total = sum(pp.end - pp.start for pp in parts.values())
    try:
        with RangeReader(conn, cp.source, todo) as reader:
            last_cp = time.monotonic()
            while not reader.done:
                msgs = reader.poll(batch, 0.5)
                positions = reader.positions
                if stop_after is not None and records_in + len(msgs) >= stop_after:
                    msgs = msgs[: stop_after - records_in]
                    positions = _positions_after(msgs, {p: pp.next for p, pp in parts.items()})
                if msgs:
                    limiter.acquire(len(msgs))
                    rows_out += sink.write(msgs)
                    records_in += len(msgs)
                for p, pos in positions.items():
                    parts[p].next = max(parts[p].next, min(pos, parts[p].end))
                if on_progress is not None:
                    on_progress(sum(pp.next - pp.start for pp in parts.values()), total)
                if stop_after is not None and records_in >= stop_after:
                    break
                if time.monotonic() - last_cp >= checkpoint_every_s:
                    _checkpoint(root, cp, sink, records_out=base_out + rows_out,
                                flush_timeout_s=flush_timeout_s)
                    last_cp = time.monotonic()
    except KeyboardInterrupt:
        # Flush and checkpoint what was sent, so the resume starts right after it.
        _checkpoint(root, cp, sink, records_out=base_out + rows_out,
                    flush_timeout_s=flush_timeout_s)
        raise
    completed = cp.remaining == 0
    if completed:
        cp.status = "completed"
    _checkpoint(root, cp, sink, records_out=base_out + rows_out, flush_timeout_s=flush_timeout_s)
    return ReplayResult(cp.replay_id, records_in, rows_out, skipped, time.monotonic() - t0,
                        completed, checkpoints.checkpoint_path(root, cp.replay_id))


def _positions_after(msgs: list[Any], current: dict[int, int]) -> dict[int, int]:
    out = dict(current)
    for m in msgs:
        out[m.partition()] = max(out.get(m.partition(), 0), m.offset() + 1)
    return out


def _checkpoint(root: Path, cp: ReplayCheckpoint, sink: Sink, *, records_out: int,
                flush_timeout_s: float) -> None:
    sink.flush(timeout_s=flush_timeout_s)  # step 3: acknowledged first ...
    for pp in cp.partitions:
        acked = sink.tracker.max_offset.get(pp.partition)
        if acked is not None:
            pp.scan_from = max(pp.scan_from, acked + 1)
    cp.records_out = records_out
    checkpoints.save(root, cp)  # ... then recorded


def make_sink(conn: KafkaConnection, root: Path, cp: ReplayCheckpoint) -> Sink:
    if cp.mode == "copy":
        return CopySink(conn, cp)
    from headrace.ops.rescoring import RescoreSink

    return RescoreSink(conn, root, cp)


def resume(conn: KafkaConnection, root: Path, replay_id: str,
           *, source: str | None = None) -> ReplayCheckpoint:
    """The checkpoint of an earlier replay, checked against the topic named now."""
    cp = checkpoints.load(root, replay_id)
    if source is not None and source != cp.source:
        raise ValidationFailed(f"replay {replay_id} reads {cp.source}, not {source}")
    if partition_count(conn, cp.target) is None:
        raise ValidationFailed(f"target topic {cp.target} does not exist")
    return cp
