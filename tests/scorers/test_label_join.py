"""The label join window on a fake clock: early and late labels, FIFO per key, the record and
age bounds, unknown classes."""

from __future__ import annotations

import numpy as np
import pytest

from headrace.core.errors import ValidationFailed
from headrace.scorers.rollout.label_join import LabelJoin, parse_label
from headrace.scorers.rollout.live_counts import BatchRows, LiveComparison, Pair

CLASSES = ("no", "yes")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _comparison() -> LiveComparison:
    comp = LiveComparison(Pair("s", "m", 1, 2), CLASSES)
    empty = np.zeros(0, np.int64)
    comp.add(BatchRows(0, 0, empty, empty, empty, np.zeros(0), np.zeros(0), empty, empty))
    return comp


def _predict(join: LabelJoin, comp: LiveComparison, keys: list[bytes], p: list[int],
             c: list[int]) -> None:
    join.predicted(comp, list(keys), np.zeros(len(keys), np.int64), np.asarray(p),
                   np.asarray(c))


def test_early_and_late_labels_join_the_oldest_unlabelled_prediction_of_their_key() -> None:
    join, comp = LabelJoin(max_records=10, max_age_s=60, clock=Clock()), _comparison()
    join.active = True
    join.labelled(b"a", "yes")  # before its prediction: waits
    _predict(join, comp, [b"a", b"b", b"b"], [1, 0, 1], [0, 0, 0])
    join.labelled(b"b", "no")  # joins the first b (production "no", candidate "no")
    join.labelled(b"b", "yes")  # then the second (production "yes", candidate "no")
    t = comp.total()
    assert (t.labelled, join.stats.joined) == (3, 3)
    assert t.production_truth.tolist() == [[1, 0], [0, 2]]
    assert t.candidate_truth.tolist() == [[1, 0], [2, 0]]
    assert join.waiting() == (0, 0)


def test_the_window_drops_the_oldest_by_count_and_by_age() -> None:
    clock = Clock()
    join, comp = LabelJoin(max_records=2, max_age_s=60, clock=clock), _comparison()
    join.active = True
    _predict(join, comp, [b"a", b"b", b"c"], [0, 0, 0], [0, 0, 0])  # "a" pushed out
    assert join.stats.expired == 1 and join.waiting() == (2, 0)
    clock.t += 61
    join.labelled(b"b", "no")  # "b" and "c" are too old: the label waits alone
    assert join.stats.expired == 3 and comp.total().labelled == 0
    clock.t += 61
    _predict(join, comp, [b"d"], [0], [0])
    assert join.stats.unmatched == 1 and join.waiting() == (1, 0)


def test_labels_are_not_kept_while_the_join_is_off_and_unknown_classes_are_counted() -> None:
    join, comp = LabelJoin(max_records=10, max_age_s=60, clock=Clock()), _comparison()
    _predict(join, comp, [b"a"], [0], [0])
    assert join.waiting() == (0, 0)  # no labels topic: predictions are not kept
    join.active = True
    _predict(join, comp, [b"a"], [0], [0])
    join.labelled(b"a", "maybe")
    assert (join.stats.unknown, comp.total().labelled) == (1, 0)
    assert [parse_label(v) for v in (b'{"label": "yes"}', b'"no"', b"3", b"{}")] == [
        "yes", "no", "3", None]
    with pytest.raises(ValidationFailed):  # no label at all: counted apart (stats.bad)
        parse_label(b"x")


def test_a_canarys_arms_are_labelled_apart_and_a_redelivered_batch_is_not_counted_again(
        ) -> None:
    """In a canary each record has one version's prediction (the other is -1): a label counts
    for that version alone, and records before the partition's next_offset (a redelivery)
    never wait for a label again."""
    join = LabelJoin(max_records=10, max_age_s=60, clock=Clock())
    join.active = True
    comp = LiveComparison(Pair("s", "m", 1, 2), CLASSES)
    offsets = np.asarray([10, 11], np.int64)
    fresh_p, fresh_c = comp.add_arms(0, 13, offsets[:1], offsets[1:])
    assert fresh_p.tolist() == [True] and fresh_c.tolist() == [True]
    join.predicted(comp, [b"p", b"c"], np.zeros(2, np.int64), np.asarray([1, -1]),
                   np.asarray([-1, 0]))
    join.labelled(b"p", "yes")  # production right
    join.labelled(b"c", "yes")  # the candidate wrong
    t = comp.total()
    assert t.production_truth.tolist() == [[0, 0], [0, 1]]
    assert t.candidate_truth.tolist() == [[0, 0], [1, 0]]
    assert (t.labelled, t.only_production_right, t.only_candidate_right) == (2, 0, 0)
    again = comp.add_arms(0, 13, offsets[:1], offsets[1:])  # the same batch, redelivered
    assert not again[0].any() and not again[1].any()
    assert comp.parts[0].next_offset == 13
