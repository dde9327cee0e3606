"""The broker's view of a consumer group's progress, read from a thread beside the scoring loop.

Read through a consumer handle of its own that never joins the group (no ``subscribe``): its
``committed`` and ``offsets_for_times`` are the consumer protocol's OffsetFetch and ListOffsets.
Not through an ``AdminClient``: librdkafka's coordinator-bound admin requests
(``list_consumer_group_offsets``) free their request state twice when the coordinator's
connection drops, and a scorer reading its group's offsets that way every few seconds died
when a broker stopped, by abort (``rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0'``, D34) or by SIGSEGV (D41).
The scorer's own consumer is not used either: calling ``position`` or ``pause`` beside its
``poll`` from another thread was seen to deadlock with the Python logger callback.

A handle that never subscribes never refreshes its metadata by itself: when a broker stops,
its partitions' new leaders stay unknown to it, and asking for their offsets times out for good
(seen: a stalled scorer's probes turned green again 8 s after a node of three stopped). A read
left unanswered refreshes the metadata and asks once more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import ClusterMetadata

from headrace.streams.clients import KafkaConnection

log = logging.getLogger(__name__)

Tp = tuple[str, int]
# ListOffsets' special timestamps: the log's end and its start.
_LATEST, _EARLIEST = -1, -2


class GroupLag:
    """How far behind a consumer group is: its partitions' ends (asked now: a fetcher that
    stopped never updates its cached ones) minus its positions, or the group's committed
    offsets where it has no position yet.

    Every call comes from one thread at a time (a lock), and answers within about four
    ``timeout_s`` (five for ``topic_view``); a partition the broker cannot answer for now is
    left out."""

    def __init__(self, conn: KafkaConnection, group_id: str, *, timeout_s: float = 2.0,
                 on_unanswered: Callable[[int], None] | None = None) -> None:
        """``on_unanswered(n)``: after a read, the ``n`` partitions the broker gave no offset
        for even after a metadata refresh (what blinds the stall check: RELIABILITY D60)."""
        # Quiet: the scorer's own clients already log every broker they lose. Read
        # uncommitted: the committed offsets without waiting out an open transaction's
        # (require_stable), the ends as the high watermarks.
        config = {**conn.consumer_config(group_id, log_level=0),
                  "isolation.level": "read_uncommitted"}
        config.pop("group.instance.id", None)  # never a member: no static identity to share
        self.consumer = Consumer(config)
        self.timeout_s = timeout_s
        self.on_unanswered = on_unanswered
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, positions: dict[Tp, int]) -> dict[Tp, int]:
        """(topic, partition) -> unconsumed records; a partition not readable now is left out."""
        if not positions:
            return {}
        with self._lock:
            if self._closed:
                return {}
            self._drain()
            starts = {tp: o for tp, o in positions.items() if o >= 0}
            unknown = [tp for tp, o in positions.items() if o < 0]
            if unknown:
                starts.update(self._committed(unknown))
            if not starts:
                return {}
            ends = self._offsets(list(starts), _LATEST)
        return {tp: max(0, high - starts[tp]) for tp, high in ends.items()}

    def topic_view(self, topic: str) -> dict[Tp, tuple[int, int]]:
        """Every partition of ``topic``: (the group's committed offset, or the log's start where
        it has none; the log's end). Empty when the topic or the broker is not there now."""
        with self._lock:
            if self._closed:
                return {}
            self._drain()
            md = self._metadata()
            t = md.topics.get(topic) if md is not None else None
            if t is None or t.error is not None or not t.partitions:
                return {}
            tps = [(topic, p) for p in sorted(t.partitions)]
            starts = self._committed(tps)
            unset = [tp for tp in tps if tp not in starts]
            if unset:
                starts.update(self._offsets(unset, _EARLIEST))
            ends = self._offsets([tp for tp in tps if tp in starts], _LATEST)
        return {tp: (starts[tp], end) for tp, end in ends.items()}

    def close(self, timeout_s: float = 10.0) -> None:
        """Close the handle once no call is under way; one still running past ``timeout_s``
        keeps it (closing a handle in use crashes the client library)."""
        if not self._lock.acquire(timeout=timeout_s):
            log.warning("group lag read still running after %.0fs; its handle is left open",
                        timeout_s)
            return
        try:
            if not self._closed:
                self._closed = True
                self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("group lag consumer close: %s", exc)
        finally:
            self._lock.release()

    def _drain(self, most: int = 1000) -> None:
        """Serve the handle's queued events (a lost broker's errors): nothing else polls it."""
        for _ in range(most):
            if self.consumer.poll(0) is None:
                return

    def _offsets(self, tps: list[Tp], which: int) -> dict[Tp, int]:
        """The broker's offsets (``which``: the end, the start) of ``tps``; those left unanswered
        are asked once more after a metadata refresh (their leader may have moved)."""
        got = self._ask_offsets(tps, which)
        missing = [tp for tp in tps if tp not in got]
        if missing and self._metadata() is not None:  # the read refreshed the leaders
            got.update(self._ask_offsets(missing, which))
        unanswered = sum(tp not in got for tp in tps)
        if unanswered and self.on_unanswered is not None:
            self.on_unanswered(unanswered)
        return got

    def _ask_offsets(self, tps: list[Tp], which: int) -> dict[Tp, int]:
        if not tps:
            return {}
        try:
            got = self.consumer.offsets_for_times([TopicPartition(t, p, which) for t, p in tps],
                                                  timeout=self.timeout_s)
        except (KafkaException, RuntimeError):  # a timeout, no leader: unknown for now
            return {}
        return _answered(got)

    def _metadata(self) -> ClusterMetadata | None:
        """The cluster's metadata, read afresh (the handle's leaders with it); None when the
        broker does not answer."""
        try:  # all topics: a metadata request naming one auto-creates it on Tansu
            return self.consumer.list_topics(timeout=self.timeout_s)
        except (KafkaException, RuntimeError):
            return None

    def _committed(self, tps: list[Tp]) -> dict[Tp, int]:
        try:
            got = self.consumer.committed([TopicPartition(t, p) for t, p in tps],
                                          timeout=self.timeout_s)
        except (KafkaException, RuntimeError):
            return {}
        return _answered(got)


def _answered(got: list[TopicPartition]) -> dict[Tp, int]:
    """The partitions given an offset, without error."""
    return {(tp.topic, tp.partition): int(tp.offset) for tp in got
            if tp.error is None and tp.offset >= 0}
