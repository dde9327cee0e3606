"""Labels for a canary: each arm's live accuracy, from ``labels.<stream>`` joined to the
predictions each version published.

In a canary the two versions score disjoint keys (a split, not pairs), so a label joins one
version's prediction: the candidate's on the candidate's keys, production's on its own. Per
partition, each version's confusion against the truth is kept in a ``LiveCounts`` of role
``canary`` (``production_truth`` / ``candidate_truth``; nothing paired, so ``matrix`` and
McNemar's counts stay 0), with the same join and window as the shadow's (``label_join``) and
the same exactly-once rule (``live_counts``): a batch moves the partition's ``next_offset``
past it and only records at or past it wait for a label, so a record delivered again is never
counted twice. The counts go out with the batch (a side output, flushed before its offsets are
committed) and a restarted scorer reads them back before it routes, so a restart loses only
the predictions still waiting in the window (as the shadow's join does).

Records the candidate failed on and production scored instead are in neither arm: they are the
candidate's errors, judged by the error-rate rule.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from headrace.contracts import RolloutRole
from headrace.rollout.canary_steps import Labelled
from headrace.scorers.engine.models import LoadedModel
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.rollout.candidate import classes_of
from headrace.scorers.rollout.label_join import LabelJoin, follow_labels
from headrace.scorers.rollout.live_counts import (
    LiveComparison,
    LiveCountsFollower,
    Pair,
    changed_counts,
    persist_last,
)
from headrace.streams.clients import KafkaConnection, partition_count
from headrace.streams.consuming import RawBatch

log = logging.getLogger(__name__)

READY_WITHIN_S = 10.0  # routing starts then even if the counts topic was not read to its end


@dataclass(frozen=True)
class Arm:
    """One version's scored rows in a batch: each row's message (in the whole batch) and the
    class it predicted (an index into the pair's classes)."""

    messages: np.ndarray
    classes: np.ndarray


def arm(out: Outputs, within: np.ndarray, class_map: np.ndarray) -> Arm:
    """``out``'s rows (scored on ``batch.select(...)``; ``within``: each of its messages' index
    in the whole batch), their classes mapped by ``class_map``."""
    if out.inputs is None or not out.scores or not len(out.scores[0]):
        return Arm(np.zeros(0, np.int64), np.zeros(0, np.int64))
    m = within[np.asarray(out.inputs.message, np.int64)]
    scores = out.scores[0].reshape(len(m), -1)
    return Arm(m, class_map[np.argmax(scores, axis=1)])


class CanaryLabels:
    """The label join of one scorer's canary, and its persisted counts."""

    def __init__(self, *, conn: KafkaConnection, live_topic: str, labels_topic: str,
                 stream: str, model_name: str, join: LabelJoin) -> None:
        self.conn, self.live_topic, self.labels_topic = conn, live_topic, labels_topic
        self.stream, self.model_name, self.join = stream, model_name, join
        self.stop = threading.Event()
        self.follower: LiveCountsFollower | None = None
        self._started = 0.0
        self._ready = False
        self._pairs: dict[tuple[int, int], LiveComparison | None] = {}
        self._maps: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def start(self) -> None:
        """Read the counts back and follow the labels (threads; once)."""
        if self.follower is not None:
            return
        self._started = time.monotonic()
        if partition_count(self.conn, self.labels_topic):
            self.join.active = True  # from the first batch routed, not when the thread looks
        self.follower = LiveCountsFollower(self.conn, self.live_topic, self.stream).start(
            self.stop)
        threading.Thread(target=follow_labels, args=(self.conn, self.labels_topic, self.join,
                                                     self.stop),
                         name="canary-labels", daemon=True).start()

    def read_back(self, timeout_s: float = READY_WITHIN_S) -> None:
        """Start, and wait until the counts are read back (at most ``timeout_s``). The canary's
        candidate loader runs this while the model loads, so the candidate is ready only with
        its counts, and routing starts with its first batch."""
        self.start()
        assert self.follower is not None
        self.follower.wait_caught_up(timeout_s)
        self._ready = True

    def ready(self) -> bool:
        """The counts are read back (or were waited for long enough): routing may start. Once
        true it stays true: other replicas' counts arriving later must not pause routing."""
        if self._ready:
            return True
        self.start()
        assert self.follower is not None
        self._ready = (self.follower.caught_up()
                       or time.monotonic() - self._started >= READY_WITHIN_S)
        return self._ready

    def comparison(self, production: LoadedModel, candidate: LoadedModel
                   ) -> LiveComparison | None:
        """The pair's counts (None for a regressor: nothing to label)."""
        key = (production.version, candidate.version)
        if key in self._pairs:
            return self._pairs[key]
        pc, cc = classes_of(production), classes_of(candidate)
        comp: LiveComparison | None = None
        if pc and cc:
            classes = pc + tuple(c for c in cc if c not in pc)
            self._maps[key] = (np.arange(len(pc), dtype=np.int64),
                               np.asarray([classes.index(c) for c in cc], np.int64))
            comp = LiveComparison(Pair(self.stream, self.model_name, production.version,
                                       candidate.version, RolloutRole.CANARY),
                                  classes, self.follower)
        self._pairs[key] = comp
        return comp

    def maps(self, comp: LiveComparison) -> tuple[np.ndarray, np.ndarray]:
        """Production's and the candidate's class index -> the pair's."""
        return self._maps[(comp.pair.production_version, comp.pair.candidate_version)]

    def count(self, comp: LiveComparison, batch: RawBatch, production: Arm, candidate: Arm,
              out: Outputs) -> None:
        """Count ``batch`` (each partition once, past its ``next_offset``), hand its fresh rows
        to the label join, and add the changed partitions' counts to ``out``. Nothing while
        there is no labels topic: no record waits for a label then, so none can count twice."""
        if not len(batch) or not self.join.active:
            return
        parts, offs = batch.partitions, batch.offsets
        for p in np.unique(parts).tolist():
            sp, sc = parts[production.messages] == p, parts[candidate.messages] == p
            pm, cm = production.messages[sp], candidate.messages[sc]
            fresh_p, fresh_c = comp.add_arms(p, int(offs[parts == p].max()) + 1, offs[pm],
                                             offs[cm])
            pm, cm = pm[fresh_p], cm[fresh_c]
            if not len(pm) and not len(cm):
                continue
            none_p, none_c = np.full(len(pm), -1, np.int64), np.full(len(cm), -1, np.int64)
            self.join.predicted(comp, [batch.keys[i] for i in pm.tolist() + cm.tolist()],
                                np.full(len(pm) + len(cm), p),
                                np.concatenate([production.classes[sp][fresh_p], none_c]),
                                np.concatenate([none_p, candidate.classes[sc][fresh_c]]))
        changed = changed_counts(comp, self.live_topic)
        if changed is not None:
            out.side.append(changed)

    @staticmethod
    def labelled(comp: LiveComparison) -> tuple[Labelled, Labelled]:
        """(production, candidate): labelled records and how many each got right, over this
        scorer's partitions."""
        t = comp.total()
        return (Labelled(int(t.production_truth.sum()), int(np.trace(t.production_truth))),
                Labelled(int(t.candidate_truth.sum()), int(np.trace(t.candidate_truth))))

    def totals(self) -> tuple[Labelled, Labelled]:
        """``labelled`` summed over every pair this scorer counted (for /metrics)."""
        prod, cand = Labelled(), Labelled()
        for comp in list(self._pairs.values()):
            if comp is not None:
                p, c = self.labelled(comp)
                prod = Labelled(prod.labelled + p.labelled, prod.correct + p.correct)
                cand = Labelled(cand.labelled + c.labelled, cand.correct + c.correct)
        return prod, cand

    def close(self) -> None:
        """The last batch is committed: persist the labels joined since, then stop."""
        self.stop.set()
        persist_last(self.conn, self.live_topic, self._pairs.values(),
                     "the canary's last label counts")
