"""Join late truth (``labels.<stream>``) to both versions' predictions of the same key.

A label is ``{"label": CLASS}`` (or the bare JSON string), keyed like the record it labels.
It joins the oldest not yet labelled prediction of its key that this scorer counted; a label
that comes first waits for its prediction. Both sides wait in a bounded window: at most
``max_records`` entries each and ``max_age_s`` seconds, the oldest going first (counted as
expired), so memory stays bounded whatever the labels do.

The window lives in memory: a scorer killed or restarted loses the predictions that were
still waiting, and their labels, when they come, find nothing (counted as unmatched): the
truth counts already persisted stay exact, they just miss those records. Counted labels are
never counted again, since a record re-delivered after a restart is not counted again either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from headrace.core import bounded_json
from headrace.core.bad_records import BadRecords
from headrace.core.errors import ValidationFailed
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.reading import Record, iter_records

if TYPE_CHECKING:
    from headrace.scorers.rollout.live_counts import LiveComparison

log = logging.getLogger(__name__)


@dataclass
class _Prediction:
    seq: int
    t: float
    comparison: LiveComparison
    partition: int
    production: int
    candidate: int


@dataclass
class _Label:
    seq: int
    t: float
    truth: str


@dataclass
class JoinStats:
    joined: int = 0
    unmatched: int = 0  # labels whose prediction never came within the window
    expired: int = 0  # predictions whose label never came within the window
    unknown: int = 0  # labels naming a class the model does not have
    bad: int = 0  # records that are no label at all (not JSON, no key, a tombstone): skipped


MAX_LABEL_BYTES = 64 * 1024  # a label is a class name


def parse_label(value: bytes) -> str | None:
    """The class a label record names; None when it names none. ``ValidationFailed`` when the
    value is no JSON (or too big or too deep for a label)."""
    doc = bounded_json.loads(value, max_bytes=MAX_LABEL_BYTES)
    if isinstance(doc, dict):
        doc = doc.get("label")
    if isinstance(doc, bool) or doc is None:
        return None
    return str(doc) if isinstance(doc, (str, int)) else None


class LabelJoin:
    def __init__(self, *, max_records: int, max_age_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_records, self.max_age_s, self.clock = max_records, max_age_s, clock
        self.active = False  # the labels topic exists: keep predictions for their labels
        self.stats = JoinStats()
        self._lock = threading.Lock()
        self._seq = 0
        self._preds: dict[bytes, deque[_Prediction]] = {}
        self._pred_order: deque[tuple[int, float, bytes]] = deque()
        self._labels: dict[bytes, deque[_Label]] = {}
        self._label_order: deque[tuple[int, float, bytes]] = deque()

    def predicted(self, comparison: LiveComparison, keys: list[bytes | None],
                  partitions: np.ndarray, production: np.ndarray, candidate: np.ndarray
                  ) -> None:
        """Counted rows, to be joined with their labels."""
        if not self.active:
            return
        now = self.clock()
        joins: list[tuple[int, str, int, int]] = []
        with self._lock:
            self._expire(now)  # a label past the window never joins
            for key, part, p, c in zip(keys, partitions.tolist(), production.tolist(),
                                       candidate.tolist(), strict=True):
                if key is None:
                    continue
                waiting = self._labels.get(key)
                if waiting:
                    lab = waiting.popleft()
                    if not waiting:
                        del self._labels[key]
                    joins.append((part, lab.truth, p, c))
                    continue
                self._seq += 1
                self._preds.setdefault(key, deque()).append(
                    _Prediction(self._seq, now, comparison, part, p, c))
                self._pred_order.append((self._seq, now, key))
            self._expire(now)
        for part, truth, p, c in joins:
            self._count(comparison, part, truth, p, c)

    def labelled(self, key: bytes, truth: str) -> None:
        now = self.clock()
        with self._lock:
            self._expire(now)  # a prediction past the window never joins
            waiting = self._preds.get(key)
            if not waiting:
                self._seq += 1
                self._labels.setdefault(key, deque()).append(_Label(self._seq, now, truth))
                self._label_order.append((self._seq, now, key))
                self._expire(now)
                return
            pred = waiting.popleft()
            if not waiting:
                del self._preds[key]
        self._count(pred.comparison, pred.partition, truth, pred.production, pred.candidate)

    def _count(self, comparison: LiveComparison, partition: int, truth: str, p: int,
               c: int) -> None:
        if comparison.add_truth(partition, truth, p, c):
            self.stats.joined += 1
        else:
            self.stats.unknown += 1

    def _expire(self, now: float) -> None:
        self.stats.expired += _drop_old(self._pred_order, self._preds, now - self.max_age_s,
                                        self.max_records)
        self.stats.unmatched += _drop_old(self._label_order, self._labels,
                                          now - self.max_age_s, self.max_records)

    def waiting(self) -> tuple[int, int]:
        """(predictions, labels) waiting now."""
        with self._lock:
            return (sum(map(len, self._preds.values())), sum(map(len, self._labels.values())))


def _drop_old(order: deque[tuple[int, float, bytes]], by_key: dict[bytes, deque[Any]],
              oldest: float, most: int) -> int:
    """Drop entries older than ``oldest`` or over ``most``; how many were still waiting."""
    dropped = 0
    while order and (order[0][1] < oldest or len(order) > most):
        seq, _, key = order.popleft()
        q = by_key.get(key)
        if q and q[0].seq == seq:  # else it was joined already
            q.popleft()
            dropped += 1
            if not q:
                del by_key[key]
    return dropped


def follow_labels(conn: KafkaConnection, topic: str, join: LabelJoin, stop: threading.Event,
                  *, check_every_s: float = 5.0) -> None:
    """Feed ``join`` from ``topic`` (from ``max_age_s`` ago: older labels cannot join) until
    ``stop``; waits for the topic to exist (the join is on only then)."""
    while not stop.is_set():
        if partition_count(conn, topic):
            break
        stop.wait(check_every_s)
    if stop.is_set():
        return
    join.active = True
    log.info("joining labels from %s", topic)
    since = int((time.time() - join.max_age_s) * 1000)
    bad = BadRecords(log, f"label on {topic}")
    for rec in iter_records(conn, topic, since_ms=since, follow=True, stop=stop.is_set):
        take_label(join, rec, bad)


def take_label(join: LabelJoin, rec: Record, bad: BadRecords) -> None:
    """Join one record of the labels topic; one that is no label is counted (``bad``) and
    skipped, whatever its bytes: the labels thread never dies on a record."""
    try:
        if rec.key is None:
            raise ValidationFailed("no key (a label is keyed like the record it labels)")
        if rec.value is None:
            raise ValidationFailed("no value (a tombstone)")
        truth = parse_label(rec.value)
    except ValidationFailed as exc:
        join.stats.bad += 1
        bad.skip(f"{rec.topic}/{rec.partition}@{rec.offset}", exc)
        return
    if truth is None:
        join.stats.unknown += 1
        return
    join.labelled(rec.key, truth)
