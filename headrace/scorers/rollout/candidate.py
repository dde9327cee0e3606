"""Run a shadow candidate on a batch production has scored: one decode, two model calls.

The candidate takes production's decoded rows as they are when its inputs are the same (the
same feature columns, or some of them: a column subset is sliced, not decoded; the same
signature); only when they differ is the batch decoded again for it (and counted). It is
called once on the whole batch, never bisected: a candidate that raises loses the batch (the
tap counts it), production never waits for a row-by-row search. Rows with a non-finite score
are left out. Pure: nothing here touches the tap's counts, so a run the tap stopped waiting
for can finish harmlessly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headrace.scorers.engine.core import ScoringCore
from headrace.scorers.engine.models import LoadedModel
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.wire.buffers import Scratch
from headrace.scorers.wire.decoding import Features, decode
from headrace.scorers.wire.inputs import Decoded, InputLimits, decode_inputs
from headrace.store.signature import OutputKind
from headrace.streams.consuming import RawBatch


@dataclass(frozen=True)
class CandidateRun:
    out: Outputs  # the candidate's predictions, formatted as production's
    message: np.ndarray  # per scored row: its message in the batch
    row: np.ndarray  # and its row inside the message
    scores: np.ndarray  # the first output, one row each
    decoded_again: bool  # the candidate's inputs differ from production's
    nonfinite: int  # rows left out for a non-finite score


def classes_of(model: LoadedModel) -> tuple[str, ...]:
    """The classes of the model's first output (empty for a regressor)."""
    if model.tabular:
        return tuple(model.classes)
    first = model.outputs[0] if model.outputs else None
    return tuple(first.classes) if first is not None and first.kind == OutputKind.CLASSES else ()


def inputs_for(candidate: LoadedModel, production: LoadedModel,
               decoded: Features | Decoded | None, batch: RawBatch, limits: InputLimits
               ) -> tuple[Features | Decoded, bool]:
    """The candidate's inputs and whether the batch had to be decoded again for them."""
    if candidate.tabular and isinstance(decoded, Features) and production.tabular:
        feats = tuple(production.features)
        if tuple(candidate.features) == feats:
            return decoded, False
        if set(candidate.features) <= set(feats):
            idx = [feats.index(f) for f in candidate.features]
            x = Scratch().matrix(decoded.num_rows, len(idx))  # aligned, as the decoder's
            np.take(decoded.x, idx, axis=1, out=x)
            return Features(x, decoded.message, decoded.row, decoded.is_arrow,
                            decoded.arrow_tables, decoded.bad), False
    if (not candidate.tabular and isinstance(decoded, Decoded)
            and decoded.signature == candidate.signature):
        return decoded, False
    if candidate.tabular:
        return decode(batch, candidate.features, None, Scratch(), limits.max_arrow_bytes,
                      limits.message), True
    return decode_inputs(batch, candidate.signature, limits), True


def run_candidate(core: ScoringCore, candidate: LoadedModel, production: LoadedModel,
                  decoded: Features | Decoded | None, batch: RawBatch,
                  limits: InputLimits) -> CandidateRun:
    """The candidate's predictions for ``batch``; raises what the candidate raises."""
    inputs, again = inputs_for(candidate, production, decoded, batch, limits)
    if isinstance(inputs, Features):
        y = np.asarray(candidate.fn(inputs.x), np.float32)
        want = (inputs.num_rows, candidate.num_outputs)
        if y.shape != want:
            raise ValueError(f"candidate returned shape {y.shape}, expected {want}")
        ys = [y]
    else:
        assert candidate.inputs_fn is not None
        ys = [np.asarray(g, np.float32) for g in candidate.inputs_fn(inputs.arrays)]
        want_all = [(inputs.num_rows, o.width) for o in candidate.outputs]
        if [g.shape for g in ys] != want_all:
            raise ValueError(f"candidate returned shapes {[g.shape for g in ys]}, expected "
                             f"{want_all}")
    nonfinite = 0
    if not all(np.isfinite(g).all() for g in ys):  # the per-row check only when it matters
        finite = np.ones(inputs.num_rows, bool)
        for g in ys:
            finite &= np.isfinite(g).reshape(len(g), -1).all(axis=1)
        nonfinite = int(np.count_nonzero(~finite))
    if nonfinite:
        ys = [g[finite] for g in ys]
        inputs = (inputs.take(finite) if isinstance(inputs, Decoded) else
                  Features(inputs.x[finite], inputs.message[finite], inputs.row[finite],
                           inputs.is_arrow, inputs.arrow_tables, inputs.bad))
    out = core.format(batch, candidate, inputs, ys)
    out.inputs, out.scores = None, []  # the candidate's predictions are all the tap keeps
    return CandidateRun(out, np.asarray(inputs.message, np.int64),
                        np.asarray(inputs.row, np.int64), ys[0].reshape(len(ys[0]), -1),
                        again, nonfinite)
