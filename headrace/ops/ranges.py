"""Which offsets a replay moves: per-partition ``[start, end)`` from offsets or timestamps.

Every bound is checked against the topic as it is *now*, with an end that is verified by
reading (``reading.probe_ends``), never the high watermark alone. The end is captured once,
before anything is produced, so a replay into its own topic never chases its own copies.

Offsets: ``--from-offset`` is inclusive, ``--to-offset`` exclusive. Timestamps: ``[from, to)``,
resolved like Kafka's ``offsets_for_times``: the first offset whose timestamp is >= the bound,
verified by reading, so it is exact even where the broker's lookup is coarse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from headrace.core.errors import ValidationFailed
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.reading import first_offsets_at, probe_ends

_TIME_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?)?(Z|[+-]\d{2}:?\d{2})?$")


@dataclass(frozen=True)
class PartitionRange:
    partition: int
    start: int  # inclusive
    end: int  # exclusive

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def parse_time(text: str, *, what: str = "time") -> int:
    """An ISO-8601 time (``2026-11-20T00:00Z``; no zone means UTC) to epoch milliseconds."""
    value = text.strip()
    if not _TIME_RE.fullmatch(value):
        raise ValidationFailed(f"{what} {text!r} is not an ISO-8601 time like 2026-11-20T00:00Z")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValidationFailed(f"{what} {text!r}: {exc}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def format_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def source_partitions(conn: KafkaConnection, topic: str) -> int:
    n = partition_count(conn, topic)
    if n is None:
        raise ValidationFailed(f"topic {topic} does not exist")
    return n


def by_offsets(
    conn: KafkaConnection,
    topic: str,
    *,
    partitions: Sequence[int],
    from_offsets: Sequence[int],
    to_offsets: Sequence[int],
) -> list[PartitionRange]:
    """Ranges from ``--partition``/``--from-offset``/``--to-offset``.

    With partitions given, each offset list is empty or as long as the partition list. Without,
    at most one ``--from-offset``/``--to-offset`` applies to every partition. Missing bounds
    mean the start / the verified end of the partition.
    """
    n = source_partitions(conn, topic)
    parts = list(partitions) if partitions else list(range(n))
    if len(set(parts)) != len(parts):
        raise ValidationFailed("a partition is given twice")
    for p in parts:
        if not 0 <= p < n:
            raise ValidationFailed(f"topic {topic} has no partition {p} (it has {n})")
    if partitions:
        for name, values in (("--from-offset", from_offsets), ("--to-offset", to_offsets)):
            if values and len(values) != len(parts):
                raise ValidationFailed(
                    f"give {name} once per --partition ({len(parts)}), or not at all")
        froms: list[int | None] = list(from_offsets) or [None] * len(parts)
        tos: list[int | None] = list(to_offsets) or [None] * len(parts)
    else:
        if len(from_offsets) > 1 or len(to_offsets) > 1:
            raise ValidationFailed("several offsets need one --partition each")
        froms = [from_offsets[0] if from_offsets else None] * len(parts)
        tos = [to_offsets[0] if to_offsets else None] * len(parts)
    bounds = probe_ends(conn, topic, parts)
    out = []
    for p, a, b in zip(parts, froms, tos, strict=True):
        low, end = bounds[p]
        start = low if a is None else a
        stop = end if b is None else b
        if start < 0 or stop < 0:
            raise ValidationFailed("offsets must be >= 0")
        if start > stop:
            raise ValidationFailed(
                f"partition {p}: --from-offset {start} is after --to-offset {stop}")
        if start < low or stop > end:
            raise ValidationFailed(
                f"partition {p}: range [{start}, {stop}) is outside the topic's [{low}, {end})")
        out.append(PartitionRange(p, start, stop))
    if sum(r.count for r in out) == 0 and (from_offsets or to_offsets):
        raise ValidationFailed(f"the range selects no records of {topic}")
    return out


def by_times(
    conn: KafkaConnection,
    topic: str,
    *,
    from_ms: int | None,
    to_ms: int | None,
    now_ms: int,
    partitions: Sequence[int] = (),
) -> list[PartitionRange]:
    """Ranges ``[first offset with ts >= from, first offset with ts >= to)`` per partition."""
    for label, ms in (("--from", from_ms), ("--to", to_ms)):
        if ms is not None and ms > now_ms:
            raise ValidationFailed(f"{label} {format_ms(ms)} is in the future")
    if from_ms is not None and to_ms is not None and from_ms >= to_ms:
        raise ValidationFailed(f"--from {format_ms(from_ms)} is not before --to {format_ms(to_ms)}")
    n = source_partitions(conn, topic)
    parts = list(partitions) if partitions else list(range(n))
    for p in parts:
        if not 0 <= p < n:
            raise ValidationFailed(f"topic {topic} has no partition {p} (it has {n})")
    bounds = probe_ends(conn, topic, parts)
    wanted = [t for t in (from_ms, to_ms) if t is not None]
    found = first_offsets_at(conn, topic, bounds, wanted) if wanted else {}
    out = []
    for p in parts:
        low, end = bounds[p]
        offs = found.get(p, [])
        start = offs[0] if from_ms is not None else low
        stop = offs[-1] if to_ms is not None else end
        out.append(PartitionRange(p, start, max(start, stop)))
    if sum(r.count for r in out) == 0:
        span = "an empty topic" if all(e <= lo for lo, e in bounds.values()) else "no records there"
        raise ValidationFailed(
            f"the time range [{_fmt(from_ms)}, {_fmt(to_ms)}) is outside {topic} ({span})")
    return out


def _fmt(ms: int | None) -> str:
    return "-" if ms is None else format_ms(ms)
