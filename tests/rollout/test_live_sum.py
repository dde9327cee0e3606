"""One live-count type: the fields it adds are every count field of the contract, and the
scorer's per-partition counts, its total and the stream's evidence are that type and add them
the same way."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from headrace.contracts import LiveCounts, RolloutRole
from headrace.core.errors import ValidationFailed
from headrace.rollout.evidence import LiveEvidence
from headrace.rollout.tally import LiveTally
from headrace.scorers.rollout.live_counts import LiveComparison, Pair, PartitionCounts

IDENTITY = {"stream", "model_name", "production_version", "candidate_version", "role",
            "partition", "next_offset", "classes", "ts", "schema_version"}


def _counts(partition: int, seed: int) -> LiveCounts:
    rng = np.random.default_rng(seed)

    def m() -> list[list[int]]:
        return rng.integers(0, 50, (2, 2)).tolist()

    return LiveCounts(stream="s", model_name="m", production_version=1, candidate_version=2,
                      role=RolloutRole.SHADOW, partition=partition, next_offset=100 + seed,
                      classes=["no", "yes"], rows=int(rng.integers(100, 200)), matrix=m(),
                      candidate_errors=seed, production_errors=seed + 1,
                      production_confidence=float(rng.random()) * 9,
                      candidate_confidence=float(rng.random()) * 9, labelled=seed * 7,
                      production_truth=m(), candidate_truth=m(),
                      only_production_right=seed * 2, only_candidate_right=seed * 3)


def as_fields(counts: LiveTally | LiveCounts) -> dict[str, object]:
    if isinstance(counts, LiveTally):
        return counts.fields()
    return {n: getattr(counts, n) for n in (*LiveCounts.SUMMED, *LiveCounts.MATRICES)}


def test_the_summed_fields_are_every_count_field_of_the_contract_and_of_the_one_tally() -> None:
    summed = set(LiveCounts.SUMMED) | set(LiveCounts.MATRICES)
    assert summed == set(LiveCounts.model_fields) - IDENTITY
    assert summed == {f.name for f in dataclasses.fields(LiveTally)} - {"k"}
    assert issubclass(PartitionCounts, LiveTally) and issubclass(LiveEvidence, LiveTally)


def test_partitions_restored_totalled_and_summed_as_evidence_agree_field_by_field() -> None:
    recs = [_counts(p, seed) for p, seed in ((0, 1), (1, 2), (2, 3))]
    want = {name: sum(getattr(r, name) for r in recs) for name in LiveCounts.SUMMED}
    want |= {name: np.sum([getattr(r, name) for r in recs], axis=0).tolist()
             for name in LiveCounts.MATRICES}
    ev = LiveEvidence.of(recs)
    comp = LiveComparison(Pair("s", "m", 1, 2), ("no", "yes"))
    for r in recs:
        comp.parts[r.partition] = PartitionCounts.restored(r)
        assert as_fields(comp.parts[r.partition]) == as_fields(r)  # restored exactly
    got = {r.partition: r for r in comp.snapshots(all_partitions=True)}
    assert {p: as_fields(r) for p, r in got.items()} == {r.partition: as_fields(r)
                                                         for r in recs}
    for got_sum in (as_fields(comp.total()), as_fields(ev)):
        assert {n: got_sum[n] for n in LiveCounts.MATRICES} == {
            n: want[n] for n in LiveCounts.MATRICES}
        assert {n: got_sum[n] for n in LiveCounts.SUMMED} == pytest.approx(
            {n: want[n] for n in LiveCounts.SUMMED})


def test_a_matrix_of_the_wrong_shape_is_refused() -> None:
    bad = _counts(0, 1).model_copy(update={"matrix": [[1, 2, 3]]})
    with pytest.raises(ValidationFailed, match="matrix is 1x3, not 2x2"):
        PartitionCounts(k=2).add(bad)
