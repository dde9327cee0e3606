"""The live comparison of a (production, candidate) pair, per data partition, exactly once.

Each partition's counts (``PartitionCounts``) cover every record before its ``next_offset``
and none after. A batch adds only its records at or past ``next_offset`` and moves it past the
batch, so a record delivered again (at-least-once: a restart, a rewind) is never counted
twice. The counts go out as a ``LiveCounts`` snapshot with the batch (a side output, flushed
before the batch's offsets are committed); a restarted scorer starts from the latest snapshot
of each partition (``LiveCountsFollower``), so after a kill -9 the counts are exactly those of
the records committed or re-consumed, each once.

All counts are integers (the confidence sums for CBPE's estimate aside), so partitions and
replicas add up, and an offline recount of the same records gives the same numbers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from headrace.contracts import LiveCounts, RolloutRole
from headrace.contracts.rollout import live_key
from headrace.core.bad_records import BadRecords
from headrace.core.errors import HeadraceError
from headrace.rollout.tally import LiveTally
from headrace.scorers.engine.outputs import SideOutput
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.compacted import Latest
from headrace.streams.producing import send_events
from headrace.streams.reading import Follower, Record, follow_ends

log = logging.getLogger(__name__)

LIVE_HEADERS = hdr.contract_headers(LiveCounts.SCHEMA, 1)  # on each LiveCounts record


@dataclass(kw_only=True)
class PartitionCounts(LiveTally):
    """One partition's tally, covering every record before ``next_offset`` and none after."""

    next_offset: int = 0

    @classmethod
    def restored(cls, rec: LiveCounts) -> PartitionCounts:
        pc = cls(k=len(rec.classes), next_offset=rec.next_offset)
        pc.add(rec)
        return pc


@dataclass(frozen=True)
class Pair:
    stream: str
    model_name: str
    production_version: int
    candidate_version: int
    role: RolloutRole = RolloutRole.SHADOW

    def key(self, partition: int) -> bytes:
        return live_key(self.stream, self.model_name, self.production_version,
                        self.candidate_version, self.role, partition)


@dataclass(frozen=True)
class BatchRows:
    """One batch's compared rows of one partition: each row's record offset, both versions'
    class index and top-class probability; ``candidate_missing``: the partition's rows that
    production scored and the candidate did not (failed, dropped, over budget)."""

    partition: int
    end_offset: int  # the batch's last offset of this partition + 1
    offsets: np.ndarray
    production: np.ndarray
    candidate: np.ndarray
    production_confidence: np.ndarray
    candidate_confidence: np.ndarray
    candidate_missing_offsets: np.ndarray  # the record offset of each such row
    production_failed_offsets: np.ndarray  # records production dead-lettered at the model


class LiveComparison:
    """One pair's counts by partition. Thread-safe: batches arrive on the scoring thread,
    labels on the label thread."""

    def __init__(self, pair: Pair, classes: tuple[str, ...],
                 follower: LiveCountsFollower | None = None) -> None:
        self.pair = pair
        self.classes = classes
        self.index = {c: i for i, c in enumerate(classes)}
        self.follower = follower
        self.parts: dict[int, PartitionCounts] = {}
        self.dirty: set[int] = set()
        self.lock = threading.Lock()
        if follower is not None:
            for p, rec in follower.latest_for(pair).items():
                self._adopt(p, rec)

    def _adopt(self, partition: int, rec: LiveCounts) -> bool:
        if tuple(rec.classes) != self.classes:
            log.warning("ignoring live counts of %s with other classes", rec.key().decode())
            return False
        self.parts[partition] = PartitionCounts.restored(rec)
        return True

    def counts(self, partition: int, first_offset: int) -> PartitionCounts:
        """The partition's counts, adopting a newer snapshot when the batch starts past them
        (another replica counted the records in between before a rebalance)."""
        pc = self.parts.get(partition)
        if pc is None or first_offset > pc.next_offset:
            newer = (self.follower.newest(self.pair, partition)
                     if self.follower is not None else None)
            if newer is not None and (pc is None or newer.next_offset > pc.next_offset) \
                    and self._adopt(partition, newer):
                pc = self.parts[partition]
        if pc is None:
            pc = self.parts[partition] = PartitionCounts(k=len(self.classes))
        return pc

    def add(self, rows: BatchRows) -> np.ndarray:
        """Count the rows at or past the partition's ``next_offset``; the mask of those."""
        with self.lock:
            first = min(int(rows.offsets.min()) if len(rows.offsets) else rows.end_offset,
                        int(rows.candidate_missing_offsets.min())
                        if len(rows.candidate_missing_offsets) else rows.end_offset)
            pc = self.counts(rows.partition, first)
            fresh = rows.offsets >= pc.next_offset
            p, c = rows.production[fresh], rows.candidate[fresh]
            np.add.at(pc.matrix, (p, c), 1)
            pc.rows += int(p.size)
            pc.production_confidence += float(rows.production_confidence[fresh].sum())
            pc.candidate_confidence += float(rows.candidate_confidence[fresh].sum())
            pc.candidate_errors += int(np.count_nonzero(
                rows.candidate_missing_offsets >= pc.next_offset))
            pc.production_errors += int(np.count_nonzero(
                rows.production_failed_offsets >= pc.next_offset))
            pc.next_offset = max(pc.next_offset, rows.end_offset)
            self.dirty.add(rows.partition)
            return fresh

    def add_arms(self, partition: int, end_offset: int, production_offsets: np.ndarray,
                 candidate_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A canary's batch of one partition: each arm scored its own records (disjoint keys,
        nothing paired). Moves ``next_offset`` past the batch; the masks of each arm's records
        at or past it, the ones whose labels may count."""
        with self.lock:
            first = min([end_offset] + [int(o.min()) for o in (production_offsets,
                                                                candidate_offsets) if len(o)])
            pc = self.counts(partition, first)
            fresh_p, fresh_c = (production_offsets >= pc.next_offset,
                                candidate_offsets >= pc.next_offset)
            pc.next_offset = max(pc.next_offset, end_offset)
            self.dirty.add(partition)
            return fresh_p, fresh_c

    def add_truth(self, partition: int, truth: str, production: int, candidate: int) -> bool:
        """A label joined to a counted record; False for a class the model does not have.
        A version that did not predict the record (a canary's other arm) is -1."""
        t = self.index.get(truth)
        if t is None:
            return False
        with self.lock:
            pc = self.parts.get(partition)
            if pc is None:
                return False
            pc.labelled += 1
            if production >= 0:
                pc.production_truth[t, production] += 1
            if candidate >= 0:
                pc.candidate_truth[t, candidate] += 1
            if production >= 0 and candidate >= 0:
                pc.only_production_right += int(production == t and candidate != t)
                pc.only_candidate_right += int(candidate == t and production != t)
            self.dirty.add(partition)
        return True

    def snapshots(self, *, all_partitions: bool = False) -> list[LiveCounts]:
        """A ``LiveCounts`` per partition changed since the last call (or every one), but
        none behind one another replica already published: the follower keeps the highest
        ``next_offset``, the log cleaner the last record, so a stale one sent after a newer
        (a replica that lost the partition and flushed late) would be what a scorer restarted
        on the compacted topic resumes from."""
        with self.lock:
            which = sorted(self.parts) if all_partitions else sorted(self.dirty)
            self.dirty.clear()
            return [self._record(p, self.parts[p]) for p in which
                    if not self._superseded(p, self.parts[p])]

    def _superseded(self, partition: int, pc: PartitionCounts) -> bool:
        newer = (self.follower.newest(self.pair, partition)
                 if self.follower is not None else None)
        if newer is not None and newer.next_offset > pc.next_offset:
            log.warning("not publishing live counts of %s up to offset %d: another scorer "
                        "published them up to %d", self.pair.key(partition).decode(),
                        pc.next_offset, newer.next_offset)
            return True
        return False

    def _record(self, partition: int, pc: PartitionCounts) -> LiveCounts:
        pr = self.pair
        return LiveCounts(
            stream=pr.stream, model_name=pr.model_name,
            production_version=pr.production_version, candidate_version=pr.candidate_version,
            role=pr.role, partition=partition, next_offset=pc.next_offset,
            classes=list(self.classes), **pc.fields())

    def total(self) -> LiveTally:
        """Every partition this scorer holds, summed (for /metrics)."""
        with self.lock:
            out = LiveTally(len(self.classes))
            for pc in self.parts.values():
                out.add(pc)
            return out


class LiveCountsFollower:
    """The latest ``LiveCounts`` of each key of one stream (the one with the highest
    ``next_offset``: robust to a snapshot produced again), followed from the beginning of the
    compacted topic in a thread."""

    def __init__(self, conn: KafkaConnection, topic: str, stream: str) -> None:
        self.conn, self.topic, self.stream = conn, topic, stream
        self._idle_since: float | None = None
        self._thread: threading.Thread | None = None
        prefix = f"{stream}|".encode()
        self.bad = BadRecords(log, f"live counts record on {topic}")
        self._latest = Latest(LiveCounts, self.bad, keep=lambda k: k.startswith(prefix),
                              newer=lambda old, new: new.next_offset >= old.next_offset)

    def start(self, stop: threading.Event) -> LiveCountsFollower:
        self._thread = threading.Thread(target=self._run, args=(stop,), name="live-counts",
                                        daemon=True)
        self._thread.start()
        return self

    def caught_up(self, idle_s: float = 0.3) -> bool:
        """The topic has been read to its end (and nothing came for ``idle_s``)."""
        idle = self._idle_since
        return idle is not None and time.monotonic() - idle >= idle_s

    def wait_caught_up(self, timeout_s: float = 10.0, idle_s: float = 0.3) -> bool:
        """Block until the topic has been read to its end (idle for ``idle_s``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.caught_up(idle_s):
                return True
            time.sleep(0.02)
        return False

    def latest_for(self, pair: Pair) -> dict[int, LiveCounts]:
        head = pair.key(0).rsplit(b"|", 1)[0] + b"|"
        return {rec.partition: rec for k, rec in self._latest.table().items()
                if k.startswith(head) and rec.role == pair.role}

    def newest(self, pair: Pair, partition: int) -> LiveCounts | None:
        return self._latest.get(pair.key(partition))

    def _run(self, stop: threading.Event) -> None:
        follower = Follower(self.conn, [self.topic], from_beginning=True)
        try:
            ends = follow_ends(self.conn, self.topic)  # idle means caught up only past them
            while not stop.is_set():
                records = follower.poll(0.2, max_messages=5000)
                if not records:
                    if self._idle_since is None and follower.reached(ends):
                        self._idle_since = time.monotonic()
                    continue
                self._idle_since = None
                for rec in records:
                    self.take(rec)
        finally:
            follower.close()

    def take(self, rec: Record) -> None:
        """One record of the topic, folded into this stream's latest counts (``Latest``): a
        tombstone, or bytes that are no counts (counted in ``bad``), remove the key."""
        self._latest.take(rec)


def changed_counts(comp: LiveComparison, topic: str) -> SideOutput | None:
    """The partitions' counts changed by a batch, as the side output that goes out with it
    (flushed before the batch's offsets are committed); None when nothing changed."""
    snaps = comp.snapshots()
    if not snaps:
        return None
    return SideOutput(topic, [s.to_bytes() for s in snaps], [s.key() for s in snaps],
                      LIVE_HEADERS)


def persist_last(conn: KafkaConnection, topic: str,
                 comps: Iterable[LiveComparison | None], what: str) -> None:
    """At close, after the last batch is committed: send the counts of labels joined since
    (no batch carries them); a failure loses only those and is logged."""
    snaps = [s for comp in comps if comp is not None for s in comp.snapshots()]
    if not snaps:
        return
    try:
        send_events(conn, topic, snaps, key_of=lambda s: s.key().decode())
    except HeadraceError as exc:
        log.warning("could not persist %s: %s", what, exc)
