"""The one scoring core: a consumed batch and a loaded model in, everything the batch publishes
out (predictions in the stream's format, dead letters), with no Kafka and no state but a reusable
feature matrix. The scorer loop (``worker``), ``replay --model`` (``ops/rescoring``), ``headrace
predict`` / ``headrace.models.load`` (``scorers/offline``) and the benchmarks all call it, so a
record is decoded and scored by the same code wherever it is scored.

Decoding goes by the model's contract: a tabular model's inputs are one numeric input, decoded by
the fast float-matrix codec (``decoding``; JSON also in the decode helper processes, ``ahead``);
a signature model's inputs by their kinds (``scorers.wire.inputs``; ahead in a thread). Both give
rows tied to their message (and Arrow row), the bad rows as ``BadInput``s; then the rows are scored
(a row the model fails on is isolated by bisection and dead-lettered alone) and formatted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from headrace.scorers.engine.models import LoadedModel
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.wire import predictions, refusals
from headrace.scorers.wire.buffers import Scratch
from headrace.scorers.wire.decoding import BadInput, DecodedAhead, Features, decode
from headrace.scorers.wire.encoding import (
    arrow_prediction_table,
    arrow_predictions,
    json_predictions,
)
from headrace.scorers.wire.inputs import Decoded, InputLimits, decode_inputs
from headrace.streams.codecs import encode_arrow
from headrace.streams.consuming import RawBatch
from headrace.streams.dlq import DeadLetter


class ScoringCore:
    """``score(batch, model)``: decode, score and format one batch. Holds only settings and
    the reusable feature matrix (one core per scoring thread)."""

    def __init__(self, *, limits: InputLimits | None = None, top_k: int | None = None) -> None:
        self.limits = limits or InputLimits()
        self.top_k = top_k
        self._scratch = Scratch()  # the feature matrix, reused once a batch is scored

    def score(self, batch: RawBatch, model: LoadedModel,
              ahead: DecodedAhead | Decoded | None = None) -> Outputs:
        """Everything ``batch`` publishes when scored by ``model``; ``ahead``: the batch as
        the decode helpers (tabular) or the decode thread (signature) already decoded it."""
        t0 = time.perf_counter()
        out = self._score(batch, model, ahead)
        out.score_s = time.perf_counter() - t0
        return out

    def _score(self, batch: RawBatch, model: LoadedModel,
               ahead: DecodedAhead | Decoded | None) -> Outputs:
        if not model.tabular:
            return self.score_signature(batch, model,
                                        ahead if isinstance(ahead, Decoded) else None)
        if isinstance(ahead, Decoded):
            ahead = None  # decoded for a signature model; never the case after the swap checks
        feats = decode(batch, model.features, ahead, self._scratch,
                       self.limits.max_arrow_bytes, self.limits.message)
        scores, model_errors = score_rows(model, feats.x)
        bad, keep = _model_failures(feats, model_errors)
        if keep is not None:
            scores = scores[keep]
            feats = Features(feats.x[keep], feats.message[keep], feats.row[keep],
                             feats.is_arrow, feats.arrow_tables, feats.bad)
        out = self.format(batch, model, feats, [scores])
        out.letters = [self._letter(batch, feats, b) for b in bad]
        return out

    def format(self, batch: RawBatch, model: LoadedModel, inputs: Features | Decoded,
               scores: list[np.ndarray]) -> Outputs:
        """The predictions ``model`` publishes for rows already decoded and scored (one row of
        ``scores`` per row of ``inputs``), without dead letters: the formatting step of
        ``score``, for a shadow candidate run on production's decoded rows."""
        if isinstance(inputs, Decoded):
            return self._format_signature(batch, model, inputs, scores)
        out = Outputs(inputs=inputs, scores=scores)
        out.scored_rows = inputs.num_rows
        out.row_timestamps_ms = batch.timestamps_ms[inputs.message]
        row_is_arrow = inputs.is_arrow[inputs.message]
        self._json(batch, inputs, scores[0], model, ~row_is_arrow, out)
        if row_is_arrow.any():
            self._arrow(batch, inputs, scores[0], model, row_is_arrow, out)
        return out

    def score_signature(self, batch: RawBatch, model: LoadedModel,
                        decoded: Decoded | None = None) -> Outputs:
        """A model with named inputs: decode into its signature (or take a batch decoded for
        an equal one), score, predict with labels, top-k and every output."""
        if decoded is None or decoded.signature != model.signature:
            decoded = decode_inputs(batch, model.signature, self.limits)
        ys, model_errors = score_inputs(model, decoded.arrays)
        bad, keep = _model_failures(decoded, model_errors)
        if keep is not None:
            ys = [y[keep] for y in ys]
            decoded = decoded.take(keep)
        out = self._format_signature(batch, model, decoded, ys)
        out.letters = [self._letter(batch, decoded, b) for b in bad]
        return out

    def _format_signature(self, batch: RawBatch, model: LoadedModel, decoded: Decoded,
                          ys: list[np.ndarray]) -> Outputs:
        out = Outputs(image_conversions=dict(decoded.conversions), inputs=decoded, scores=ys)
        msgs = decoded.message
        out.scored_rows = len(msgs)
        out.row_timestamps_ms = batch.timestamps_ms[msgs]
        if not len(msgs):
            return out
        # One row a message, all scored (a JSON batch): the batch's own lists, no per-row copy.
        whole = len(msgs) == len(batch) and bool((msgs == np.arange(len(msgs))).all())
        keys = batch.keys if whole else [batch.keys[i] for i in msgs.tolist()]
        only = batch.single_topic()
        topics = ([only] * len(msgs) if only is not None
                  else [batch.topics[i] for i in msgs.tolist()])
        cols = predictions.Columns(
            list(zip(model.outputs, ys, strict=True)),
            predictions.Source(keys=keys, topics=topics,
                               partitions=batch.partitions[msgs], offsets=batch.offsets[msgs],
                               rows=decoded.row),
            model_name=model.name, model_version=model.version, top_k=self.top_k)
        arrow_rows = decoded.is_arrow[msgs]
        if not arrow_rows.any():
            out.json_values = cols.json_lines()
            out.json_keys = list(keys)  # its own list: a canary merge extends it
            out.json_sources.append(msgs)
            return out
        # One Arrow table per Arrow message; consecutive JSON rows in one run of the kernels.
        starts = np.flatnonzero(np.r_[True, (msgs[1:] != msgs[:-1]) & (
            arrow_rows[1:] | arrow_rows[:-1])])
        ends = np.r_[starts[1:], len(msgs)]
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            i = int(msgs[s])
            if decoded.is_arrow[i]:
                out.arrow_values.append(arrow_predictions(cols.arrow_table(s, e)))
                out.arrow_keys.append(batch.keys[i])
                out.arrow_messages.append(i)
            else:
                out.json_values += cols.json_lines(s, e)
                out.json_keys += keys[s:e]
                out.json_sources.append(msgs[s:e])
        return out

    def _json(self, batch: RawBatch, feats: Features, scores: np.ndarray, model: LoadedModel,
              mask: np.ndarray, out: Outputs) -> None:
        msgs = feats.message[mask]
        if not len(msgs):
            return
        topics = batch.topics
        only = batch.single_topic()
        groups = [(only, np.ones(len(msgs), bool))] if only is not None else [
            (t, np.asarray([topics[i] == t for i in msgs.tolist()]))
            for t in sorted({topics[i] for i in msgs.tolist()})]
        sc = scores[mask]
        for topic, sel in groups:
            m = msgs[sel]
            # Rows follow their messages in order: every message scored means m is 0..n-1.
            keys = batch.keys if len(m) == len(batch) else [batch.keys[i] for i in m.tolist()]
            out.json_values += json_predictions(
                keys=keys, source_topic=topic, partitions=batch.partitions[m],
                offsets=batch.offsets[m], model_name=model.name, model_version=model.version,
                scores=sc[sel], classes=model.classes)
            out.json_keys += keys
            out.json_sources.append(m)

    def _arrow(self, batch: RawBatch, feats: Features, scores: np.ndarray, model: LoadedModel,
               mask: np.ndarray, out: Outputs) -> None:
        msgs = feats.message[mask]
        rows = feats.row[mask]
        sc = scores[mask]
        # Rows of one message are contiguous (decoded message by message).
        starts = np.flatnonzero(np.r_[True, msgs[1:] != msgs[:-1]])
        ends = np.r_[starts[1:], len(msgs)]
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            i = int(msgs[s])
            table = arrow_prediction_table(
                key=batch.keys[i], source_topic=batch.topics[i],
                partition=int(batch.partitions[i]), offset=int(batch.offsets[i]),
                rows=rows[s:e], model_name=model.name, model_version=model.version,
                scores=sc[s:e], classes=model.classes)
            out.arrow_values.append(arrow_predictions(table))
            out.arrow_keys.append(batch.keys[i])
            out.arrow_messages.append(i)

    def _letter(self, batch: RawBatch, feats: Features | Decoded, bad: BadInput) -> DeadLetter:
        i = bad.message
        value = None
        if bad.row is not None and i in feats.arrow_tables:
            value = encode_arrow(feats.arrow_tables[i].slice(bad.row, 1))  # just the bad row
        return DeadLetter.from_error(refusals.input_ref(batch, i, value), bad.error,
                                     stage=bad.stage, row=bad.row)


def score_rows(model: LoadedModel, x: np.ndarray) -> tuple[np.ndarray, dict[int, Exception]]:
    """Scores of every row; rows the model raises on (or returns non-finite scores for) are
    isolated by bisection and returned as errors, the rest of the batch is scored."""
    scores = np.zeros((len(x), model.num_outputs), np.float32)

    def score(lo: int, hi: int) -> np.ndarray:
        y = np.asarray(model.fn(x[lo:hi]), np.float32)
        if y.shape != (hi - lo, model.num_outputs):
            raise ValueError(f"model returned shape {y.shape}, expected "
                             f"{(hi - lo, model.num_outputs)}")
        scores[lo:hi] = y
        return np.isfinite(y).all(axis=1)

    return scores, _isolating_failures(len(x), score)


def score_inputs(model: LoadedModel, inputs: dict[str, np.ndarray]
                 ) -> tuple[list[np.ndarray], dict[int, Exception]]:
    """``score_rows`` for a model with named inputs and several outputs."""
    assert model.inputs_fn is not None
    n = len(next(iter(inputs.values()))) if inputs else 0
    ys = [np.zeros((n, o.width), np.float32) for o in model.outputs]

    def score(lo: int, hi: int) -> np.ndarray:
        assert model.inputs_fn is not None
        got = model.inputs_fn({k: v[lo:hi] for k, v in inputs.items()})
        want = [(hi - lo, o.width) for o in model.outputs]
        if [g.shape for g in got] != want:
            raise ValueError(f"model returned shapes {[g.shape for g in got]}, expected "
                             f"{want}")
        finite = np.ones(hi - lo, bool)
        for y, g in zip(ys, got, strict=True):
            y[lo:hi] = g
            finite &= np.isfinite(g).all(axis=1)
        return finite

    return ys, _isolating_failures(n, score)


def _isolating_failures(n: int, score: Callable[[int, int], np.ndarray]
                        ) -> dict[int, Exception]:
    """Run ``score(lo, hi)`` (it stores the rows' scores, returns which are finite) over rows
    0..n; a slice it raises on is halved until each failing row is alone. The errors by row."""
    errors: dict[int, Exception] = {}
    # A stack, not a recursive closure: that would be a reference cycle holding the batch (the
    # decoder's reusable matrix) until the next cycle collection.
    todo = [(0, n)] if n else []
    while todo:
        lo, hi = todo.pop()
        try:
            finite = score(lo, hi)
        except Exception as exc:
            if hi - lo == 1:
                errors[lo] = exc
            else:
                mid = (lo + hi) // 2
                todo += [(mid, hi), (lo, mid)]  # the lower half first
            continue
        if not finite.all():
            for i in np.flatnonzero(~finite).tolist():
                errors[lo + i] = ValueError("model returned a non-finite score")
    return errors


def _model_failures(rows: Features | Decoded, model_errors: dict[int, Exception]
                    ) -> tuple[list[BadInput], np.ndarray | None]:
    """The batch's bad inputs plus one per row the model failed on, and the mask of the rows
    to keep (None when the model failed on none)."""
    bad = list(rows.bad)
    if not model_errors:
        return bad, None
    failed = np.fromiter(model_errors, np.int64, len(model_errors))
    for r in failed.tolist():
        m = int(rows.message[r])
        bad.append(BadInput(m, int(rows.row[r]) if rows.is_arrow[m] else None,
                            model_errors[r], "model"))
    keep = np.ones(rows.num_rows, bool)
    keep[failed] = False
    return bad, keep
