"""The lineage tap's ranges: one per run of batches a (model, version, role) scored back to
back in a partition; a version change, a gap (a rebalance, a rewind) or a role starts another.
The end-to-end test with a real scorer is tests/ops/test_lineage.py; these drive the tap with
batches shaped as the worker hands them over (canary rows arrive as a second ``Scored``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from headrace.contracts import LineageRange, RolloutRole, RolloutState, parse
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.engine.taps import Scored
from headrace.scorers.lineage_tap import LineageTap
from headrace.scorers.wire.decoding import Features
from headrace.streams.consuming import RawBatch

TOPIC = "data.s"


def _batch(parts: list[int], offsets: list[int]) -> RawBatch:
    n = len(parts)
    return RawBatch([b"{}"] * n, [None] * n, [TOPIC] * n, np.asarray(parts, np.int32),
                    np.asarray(offsets, np.int64), np.full(n, -1, np.int64), [None] * n)


def _scored(batch: RawBatch, messages: list[int], version: int,
            role: RolloutRole | None = None) -> Scored:
    msgs = np.asarray(messages, np.int64)
    feats = Features(np.zeros((len(msgs), 1), np.float32), msgs, np.zeros(len(msgs), np.int32),
                     np.zeros(len(batch), bool))
    model = SimpleNamespace(name="m", version=version)  # the tap reads only its identity
    return Scored(batch, model, Outputs(), feats, [np.zeros((len(msgs), 2))], role)  # type: ignore[arg-type]


def _published(tap: LineageTap, scored: Scored) -> list[LineageRange]:
    tap.after_scoring(scored)
    (side,) = scored.out.side
    assert side.topic == "control.lineage"
    ranges = [parse(LineageRange, v) for v in side.values]
    assert side.keys == [r.key() for r in ranges]
    return ranges


def _span(r: LineageRange) -> tuple[int, int, int, int, str, int]:
    return (r.partition, r.version, r.first, r.last, r.role.value, r.records)


def test_ranges_grow_split_on_version_and_gaps_and_skip_dead_letters() -> None:
    tap = LineageTap("s", "control.lineage")
    b1 = _batch([0, 0, 1, 0], [10, 11, 5, 12])
    got = _published(tap, _scored(b1, [0, 1, 2, 3], 1))
    assert sorted(map(_span, got)) == [(0, 1, 10, 12, "production", 3),
                                       (1, 1, 5, 5, "production", 1)]
    # The next batch continues both partitions; message 1 was dead-lettered (not scored).
    b2 = _batch([0, 1, 1], [13, 6, 7])
    got = _published(tap, _scored(b2, [0, 2], 1))
    assert sorted(map(_span, got)) == [(0, 1, 10, 13, "production", 4),
                                       (1, 1, 5, 7, "production", 2)]
    # Version 2 from here: a new range with its own key, the old one stays as it was.
    got = _published(tap, _scored(_batch([0], [14]), [0], 2))
    assert list(map(_span, got)) == [(0, 2, 14, 14, "production", 1)]
    # A gap (another replica scored 15..19 after a rebalance): a new range, same version.
    got = _published(tap, _scored(_batch([0], [20]), [0], 2))
    assert list(map(_span, got)) == [(0, 2, 20, 20, "production", 1)]
    got = _published(tap, _scored(_batch([0], [21]), [0], 2))
    assert list(map(_span, got)) == [(0, 2, 20, 21, "production", 2)]
    # A rewind (re-delivery after a failed commit) starts a new range.
    got = _published(tap, _scored(_batch([0, 0], [20, 21]), [0, 1], 2))
    assert list(map(_span, got)) == [(0, 2, 20, 21, "production", 2)]
    assert got[0].key() == b"s|0|20|m|2|production"
    got = _published(tap, _scored(_batch([0], [22]), [0], 2))
    assert list(map(_span, got)) == [(0, 2, 20, 22, "production", 3)]


def test_canary_and_shadow_rows_get_ranges_of_their_own() -> None:
    watch = SimpleNamespace(current=None)
    tap = LineageTap("s", "control.lineage", watch)  # type: ignore[arg-type]
    b = _batch([0] * 6, [0, 1, 2, 3, 4, 5])
    prod = _published(tap, _scored(b, [0, 2, 3, 5], 1))
    canary = _published(tap, _scored(b, [1, 4], 2, RolloutRole.CANARY))
    assert list(map(_span, prod)) == [(0, 1, 0, 5, "production", 4)]
    assert list(map(_span, canary)) == [(0, 2, 1, 4, "canary", 2)]
    b2 = _batch([0, 0], [6, 7])
    canary = _published(tap, _scored(b2, [1], 2, RolloutRole.CANARY))
    assert list(map(_span, canary)) == [(0, 2, 1, 7, "canary", 3)]
    # The candidate's rows handed over as a batch of their own (a part of the same records)
    # are not mistaken for a rewind.
    b3 = _batch([0, 0, 0], [8, 9, 10])
    _published(tap, _scored(b3, [0, 2], 1))
    canary = _published(tap, _scored(_batch([0], [9]), [0], 2, RolloutRole.CANARY))
    assert list(map(_span, canary)) == [(0, 2, 1, 9, "canary", 4)]
    # A shadow candidate scores the same records as production: both get a range.
    watch.current = RolloutState(stream="s", model_name="m", candidate_version=3,
                                 role=RolloutRole.SHADOW)
    both = _published(tap, _scored(_batch([0], [11]), [0], 1))
    assert sorted(map(_span, both)) == [(0, 1, 0, 11, "production", 7),
                                        (0, 3, 11, 11, "shadow", 1)]
