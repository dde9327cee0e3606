"""Signature-model predictions: row by row (``predictions.rows`` + one msgspec encode a row, or
dicts back into Arrow columns) vs column by column (``predictions.Columns``), same process,
interleaved, on the text model's output shape (2 classes) and a 1000-class top-5 classifier.

Run: ``python bench/bench_predictions.py [ROWS] [REPS]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

from headrace.scorers.wire import predictions as p
from headrace.scorers.wire.encoding import arrow_predictions
from headrace.store.signature import ModelOutput, OutputKind


def _best(fn: Callable[[], None], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    rng = np.random.default_rng(0)
    src = p.Source([f"k{i}".encode() for i in range(n)], ["data.bench"] * n,
                   np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                   np.arange(n, dtype=np.int32) % 1024)
    cases = {
        "2 classes": [ModelOutput(name="y", kind=OutputKind.CLASSES, classes=("neg", "pos"))],
        "1000 classes, top-5": [ModelOutput(name="y", kind=OutputKind.CLASSES,
                                            classes=tuple(f"c{i}" for i in range(1000)))],
        "2 outputs (classes + value)": [
            ModelOutput(name="y", kind=OutputKind.CLASSES, classes=("neg", "pos")),
            ModelOutput(name="v", kind=OutputKind.VALUES)],
    }
    msgs = [(s, min(s + 1024, n)) for s in range(0, n, 1024)]  # Arrow: messages of 1024 rows
    print(f"{n} rows; best of {reps}; Arrow as {len(msgs)} messages of 1024 rows")
    print(f"{'outputs':30} {'format':6} {'row by row ms':>14} {'columnar ms':>12} {'ratio':>7}")
    for name, outs in cases.items():
        ys = [(o, rng.random((n, o.width), dtype=np.float32)) for o in outs]
        _compare(name, ys, src, msgs, reps)


def _compare(name: str, ys: list[tuple[ModelOutput, np.ndarray]], src: p.Source,
             msgs: list[tuple[int, int]], reps: int) -> None:
    def rows_json() -> None:
        p.json_lines(p.rows(ys, src, model_name="m", model_version=1, top_k=None))

    def cols_json() -> None:
        p.Columns(ys, src, model_name="m", model_version=1, top_k=None).json_lines()

    def rows_arrow() -> None:
        recs = p.rows(ys, src, model_name="m", model_version=1, top_k=None)
        for s, e in msgs:
            arrow_predictions(p.arrow_table(recs[s:e]))

    def cols_arrow() -> None:
        c = p.Columns(ys, src, model_name="m", model_version=1, top_k=None)
        for s, e in msgs:
            arrow_predictions(c.arrow_table(s, e))

    for fmt, a, b in (("json", rows_json, cols_json), ("arrow", rows_arrow, cols_arrow)):
        ta, tb = _best(a, reps), _best(b, reps)
        print(f"{name:30} {fmt:6} {ta * 1e3:14.1f} {tb * 1e3:12.1f} {ta / tb:6.1f}x")

if __name__ == "__main__":
    main()
