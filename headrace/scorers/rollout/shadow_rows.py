"""What one shadow batch adds to the live comparison, prepared off the scoring thread.

Pairing production's rows with the candidate's by (message, row), each version's top class and
its probability, and the split by partition are pure array work on the batch: the candidate's
thread does it right after the candidate's model call (``pair_rows``), so the scoring thread
only adds the prepared rows to the counts when it collects the run. Without a candidate run
(dropped: budget, busy, error) the scoring thread prepares the batch itself; then no row is
paired and the work is a few array operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headrace.scorers.rollout.live_counts import BatchRows
from headrace.streams.consuming import RawBatch

# Up to this many classes the top class is found column by column (a few vector operations);
# argmax over a row of 2-8 values costs ~10x more per row in numpy's per-row reduction.
FEW_CLASSES = 16


@dataclass(frozen=True)
class Production:
    """Production's rows of the batch, kept from ``after_scoring`` (one entry per row)."""

    messages: np.ndarray  # its message in the batch
    rows: np.ndarray  # its row inside the message
    scores: np.ndarray  # production's first output
    failed: list[tuple[int, int]]  # (partition, offset) of rows production's model failed on


@dataclass(frozen=True)
class PartitionRows:
    """One partition's rows for ``LiveComparison.add``, the message of each paired row and,
    when labels were joined as the batch was prepared, its key (``None``: not prepared)."""

    rows: BatchRows
    messages: np.ndarray
    keys: list[bytes | None] | None


def top_class(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's top class (the first of equal maxima, as ``argmax``) and its score."""
    n = len(scores)
    k = scores.shape[1] if scores.ndim == 2 else 0
    if n == 0 or k == 0:
        return np.zeros(n, np.int64), np.zeros(n, np.float32)
    if k > FEW_CLASSES:
        idx = np.argmax(scores, axis=1)
        return idx, np.take_along_axis(scores, idx[:, None], axis=1)[:, 0]
    best = scores[:, 0].copy()
    idx = np.zeros(n, np.int64)
    for j in range(1, k):
        col = scores[:, j]
        idx[col > best] = j  # strictly greater: a tie keeps the earlier class
        np.maximum(best, col, out=best)
    return idx, best


def pair_rows(batch: RawBatch, prod: Production, cand_classes: np.ndarray | None,
              message: np.ndarray | None = None, row: np.ndarray | None = None,
              scores: np.ndarray | None = None, *, keys: bool = False
              ) -> list[PartitionRows]:
    """The batch's rows per partition: both versions' top class and confidence for the rows
    both predicted (``message``/``row``/``scores``: the candidate's; ``cand_classes`` maps
    its class indices to the comparison's), the offsets of production's rows the candidate did
    not predict, those of the rows production's model failed on. None of the candidate's:
    every production row is missing."""
    if not len(batch):
        return []
    pm, prow = prod.messages, prod.rows
    if scores is not None and cand_classes is not None and message is not None \
            and row is not None and len(pm):
        if np.array_equal(pm, message) and np.array_equal(prow, row):
            ip = ic = None  # the same rows (production's decoded inputs): no pairing
        else:
            _, ip, ic = np.intersect1d((pm << 32) | prow, (message << 32) | row,
                                       assume_unique=True, return_indices=True)
        ci, c_conf = top_class(scores if ic is None else scores[ic])
        c_idx = cand_classes[ci]
    else:
        ip = np.zeros(0, np.int64)
        c_idx, c_conf = ip, np.zeros(0, np.float32)
    pi, p_conf = top_class(prod.scores if ip is None else prod.scores[ip])
    if ip is None:
        cmsg, missing = pm, pm[:0]
    else:
        cmsg = pm[ip]
        miss = np.ones(len(pm), bool)
        miss[ip] = False
        missing = pm[miss]
    parts, offs = batch.partitions, batch.offsets
    out: list[PartitionRows] = []
    uniq = np.unique(parts).tolist()
    for p in uniq:
        if len(uniq) == 1:  # one partition (the usual batch): no selection to copy
            sel: np.ndarray | slice = slice(None)
            end = int(offs.max()) + 1
            miss_p = missing
        else:
            sel = parts[cmsg] == p
            end = int(offs[parts == p].max()) + 1
            miss_p = missing[parts[missing] == p]
        msgs = cmsg[sel]
        rows = BatchRows(
            partition=p, end_offset=end, offsets=offs[msgs], production=pi[sel],
            candidate=c_idx[sel], production_confidence=p_conf[sel],
            candidate_confidence=c_conf[sel], candidate_missing_offsets=offs[miss_p],
            production_failed_offsets=np.asarray([o for q, o in prod.failed if q == p],
                                                 np.int64))
        out.append(PartitionRows(rows, msgs, [batch.keys[i] for i in msgs.tolist()]
                                 if keys else None))
    return out
