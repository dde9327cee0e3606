"""The lineage index tap: per data-topic partition, the offset ranges each (model, version,
role) scored, published to the compacted ``control.lineage`` (``contracts.LineageRange``).

Why a compacted topic rather than a DFS file: the record goes out as a side output, so the
worker flushes it before it commits the batch's offsets (exactly as durable as the
predictions, in the same transaction when the scorer is transactional), with no extra write
path, no fsync on the shared filesystem and no hand-over between replicas when partitions move.
Cost: one small record per open range per batch, never one per scored record; the open range
keeps its key (its first offset), so compaction leaves one record per range.

A range grows while the same (model, version) keeps scoring the partition's batches back to
back in that role. A new one starts when the version changes, or when a batch does not start
where this scorer's last batch of the partition ended (a rebalance, a rewind, or a gap such as
transaction markers): so a range never claims offsets another replica scored. With a shadow
candidate running, the candidate gets its own (SHADOW) range over the same records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headrace.contracts import LineageRange, RolloutRole
from headrace.scorers.engine import taps
from headrace.scorers.rollout.state import RolloutWatch, watch_of
from headrace.streams.topics import ControlTopics


@dataclass
class _Open:
    model: str
    version: int
    first: int
    last: int
    records: int
    topic: str


class LineageTap:
    name = "lineage"

    def __init__(self, stream: str, topic: str, rollout: RolloutWatch | None = None) -> None:
        self.stream = stream
        self.topic = topic  # control.lineage
        self.rollout = rollout
        self._open: dict[tuple[int, RolloutRole], _Open] = {}
        # partition -> (first offset, the offset after the last) of this scorer's last batch
        self._span: dict[int, tuple[int, int]] = {}
        self._batch: object | None = None

    def after_scoring(self, scored: taps.Scored) -> None:
        batch = scored.batch
        if batch is not self._batch:  # canary: the same batch comes once per role
            self._batch = batch
            self._follow(batch.partitions, batch.offsets)
        msgs = np.unique(scored.messages())
        if msgs.size == 0:
            return
        parts = np.asarray(batch.partitions)[msgs]
        offs = np.asarray(batch.offsets)[msgs]
        topics = batch.topics
        roles = [(scored.role or RolloutRole.PRODUCTION, scored.model.version)]
        shadow = self._shadow_version()
        if scored.role is None and shadow is not None:
            roles.append((RolloutRole.SHADOW, shadow))
        values: list[bytes] = []
        keys: list[bytes | None] = []
        for p in np.unique(parts).tolist():
            mine = offs[parts == p]
            first, last, n = int(mine.min()), int(mine.max()), int(mine.size)
            topic = topics[int(msgs[int(np.argmax(parts == p))])]
            for role, version in roles:
                rng = self._extend(p, role, scored.model.name, version, first, last, n, topic)
                values.append(rng.to_bytes())
                keys.append(rng.key())
        scored.add(taps.SideOutput(self.topic, values, keys))

    def _follow(self, partitions: np.ndarray, offsets: np.ndarray) -> None:
        """Close every open range of a partition whose batch does not continue the last one.
        A batch inside the last one's span is a part of it (a role's share of the same
        records), not a rewind."""
        parts = np.asarray(partitions)
        offs = np.asarray(offsets)
        for p in np.unique(parts).tolist():
            mine = offs[parts == p]
            lo, hi = int(mine.min()), int(mine.max())
            span = self._span.get(p)
            if span is not None and span[0] <= lo and hi < span[1]:
                continue
            if span is None or span[1] != lo:
                for k in [k for k in self._open if k[0] == p]:
                    del self._open[k]
            self._span[p] = (lo, hi + 1)

    def _extend(self, p: int, role: RolloutRole, model: str, version: int, first: int,
                last: int, n: int, topic: str) -> LineageRange:
        cur = self._open.get((p, role))
        if cur is None or cur.model != model or cur.version != version or first < cur.first:
            cur = self._open[(p, role)] = _Open(model, version, first, last, 0, topic)
        cur.last = max(cur.last, last)
        cur.records += n
        return LineageRange(stream=self.stream, topic=cur.topic, partition=p,
                            model_name=cur.model, version=cur.version, role=role,
                            first=cur.first, last=cur.last, records=cur.records)

    def _shadow_version(self) -> int | None:
        state = self.rollout.current if self.rollout is not None else None
        if state is None or state.role != RolloutRole.SHADOW:
            return None
        v = state.candidate_version
        return int(v) if v is not None else None

    def close(self) -> None:
        self._open.clear()
        self._span.clear()


def make(context: taps.TapContext) -> LineageTap:
    return LineageTap(context.scorer.stream, ControlTopics.of(context.settings).lineage,
                      watch_of(context))
