"""The shadow's per-batch pairing (``shadow_rows``), which the candidate's thread runs: equal to
a row-by-row recount, for every shape of batch the tap meets."""

from __future__ import annotations

import numpy as np
import pytest

from headrace.scorers.rollout.shadow_rows import Production, pair_rows, top_class
from headrace.streams.consuming import RawBatch


@pytest.mark.parametrize("k", [1, 2, 3, 17])
def test_top_class_is_argmax_with_the_first_of_equal_maxima(k: int) -> None:
    rng = np.random.default_rng(k)
    scores = rng.random((500, k)).astype(np.float32)
    scores[:50] = 0.5  # every class tied: the first wins, as argmax
    scores[50:100, -1] = scores[50:100, 0]  # the first and the last tied
    idx, conf = top_class(scores)
    assert idx.tolist() == np.argmax(scores, axis=1).tolist()
    assert conf.tolist() == scores.max(axis=1).tolist()
    empty_idx, empty_conf = top_class(np.zeros((0, k), np.float32))
    assert len(empty_idx) == len(empty_conf) == 0


def _batch(parts: list[int], offsets: list[int]) -> RawBatch:
    n = len(parts)
    return RawBatch([b"{}"] * n, [f"k{i}".encode() for i in range(n)], ["data.s"] * n,
                    np.asarray(parts, np.int32), np.asarray(offsets, np.int64),
                    np.zeros(n, np.int64), [[] for _ in range(n)])


def _by_row(batch: RawBatch, prod: Production, cmap: np.ndarray, message: np.ndarray,
            row: np.ndarray, scores: np.ndarray) -> dict[int, dict[str, list[object]]]:
    """The same rows counted one by one, in Python."""
    cand = {(int(m), int(r)): s for m, r, s in zip(message, row, scores, strict=True)}
    out: dict[int, dict[str, list[object]]] = {}
    for m, r, ps in zip(prod.messages, prod.rows, prod.scores, strict=True):
        p = int(batch.partitions[m])
        d = out.setdefault(p, {"offsets": [], "production": [], "candidate": [], "missing": [],
                               "keys": []})
        cs = cand.get((int(m), int(r)))
        if cs is None:
            d["missing"].append(int(batch.offsets[m]))
            continue
        d["offsets"].append(int(batch.offsets[m]))
        d["production"].append(int(np.argmax(ps)))
        d["candidate"].append(int(cmap[int(np.argmax(cs))]))
        d["keys"].append(batch.keys[m])
    return out


def test_pair_rows_equals_a_row_by_row_recount_across_partitions_and_missing_rows() -> None:
    # Two partitions interleaved; message 2 holds three (Arrow) rows; message 4 was a model
    # failure in production (not among its rows) and the candidate left out two rows.
    batch = _batch([0, 1, 0, 1, 0, 1], [10, 20, 11, 21, 12, 22])
    pm = np.asarray([0, 1, 2, 2, 2, 3, 5], np.int64)
    prow = np.asarray([0, 0, 0, 1, 2, 0, 0], np.int64)
    rng = np.random.default_rng(0)
    prod = Production(pm, prow, rng.random((7, 3)).astype(np.float32), [(0, 12)])
    keep = np.asarray([True, False, True, True, False, True, True])
    message, row = pm[keep], prow[keep]
    cscores = rng.random((int(keep.sum()), 2)).astype(np.float32)
    cmap = np.asarray([2, 0], np.int64)  # the candidate's classes in the comparison's order
    got = pair_rows(batch, prod, cmap, message, row, cscores, keys=True)
    want = _by_row(batch, prod, cmap, message, row, cscores)
    assert [g.rows.partition for g in got] == [0, 1]
    for g in got:
        w, r = want[g.rows.partition], g.rows
        assert r.offsets.tolist() == w["offsets"]
        assert r.production.tolist() == w["production"]
        assert r.candidate.tolist() == w["candidate"]
        assert sorted(r.candidate_missing_offsets.tolist()) == w["missing"]
        assert g.keys == w["keys"]
        assert [batch.keys[i] for i in g.messages.tolist()] == w["keys"]
        assert r.end_offset == (13 if r.partition == 0 else 23)
        assert r.production_failed_offsets.tolist() == ([12] if r.partition == 0 else [])
        assert np.allclose(r.candidate_confidence,
                           [cscores[i].max() for i in range(len(message))
                            if batch.partitions[message[i]] == r.partition])


def test_pair_rows_on_the_same_rows_and_without_a_candidate() -> None:
    batch = _batch([3] * 4, [5, 6, 7, 8])
    pm = np.arange(4, dtype=np.int64)
    prod = Production(pm, np.zeros(4, np.int64),
                      np.asarray([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5], [0.3, 0.7]], np.float32),
                      [])
    cs = np.asarray([[0.1, 0.9], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]], np.float32)
    [same] = pair_rows(batch, prod, np.asarray([0, 1]), pm, np.zeros(4, np.int64), cs)
    assert same.rows.production.tolist() == [0, 1, 0, 1]
    assert same.rows.candidate.tolist() == [1, 1, 0, 0]
    assert same.rows.offsets.tolist() == [5, 6, 7, 8]
    assert len(same.rows.candidate_missing_offsets) == 0 and same.keys is None
    [none] = pair_rows(batch, prod, None)  # the candidate dropped: every row is missing
    assert len(none.rows.offsets) == len(none.rows.production) == 0
    assert none.rows.candidate_missing_offsets.tolist() == [5, 6, 7, 8]
    assert none.rows.end_offset == 9
    assert pair_rows(_batch([], []), prod, None) == []
