"""Drift tracking cost.

In process: nanoseconds per row and feature of a closed window (fixed-bin counting as batches
arrive, PSI/KS/chi-square at the close), side by side with the cost of only copying
the same columns (the floor any tracker pays), and the one-off cost of fitting and calibrating a
profile.

    python bench/bench_drift.py [--rows 200000] [--features 32] [--window 1000]

The real scorer (``--scorer``): the bench_scoring MLP (32 float32 features, Arrow messages of
4096 rows) with a drift profile in its version, scored from a preloaded topic with the drift tap
on and off (alternating runs, best of each), on an embedded broker: the ratio of rows/s and
the extra nanoseconds per row and drift feature (32 inputs + 2 prediction features).

    python bench/bench_drift.py --scorer [--quick] [--rows-per-batch 1024]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from headrace.drift.fitting import fit_profile
from headrace.drift.windows import DriftWindow


def _best(fn: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--scorer", action="store_true", help="the real scorer, drift on vs off")
    ap.add_argument("--quick", action="store_true", help="with --scorer: a shorter run")
    ap.add_argument("--rows-per-batch", type=int, default=1024,
                    help="with --scorer: HEADRACE_SCORER_DRIFT_ROWS_PER_BATCH")
    args = ap.parse_args()
    if args.scorer:
        from bench_drift_scorer import run  # bench/ is on sys.path when run as a script

        run(quick=args.quick, window=args.window, rows_per_batch=args.rows_per_batch)
        return
    rng = np.random.default_rng(0)
    train = {f"f{i}": rng.normal(size=20_000) for i in range(args.features)}
    t = time.perf_counter()
    profile = fit_profile(train, window=args.window)
    fit_s = time.perf_counter() - t
    live = rng.normal(size=(args.rows, args.features)).astype(np.float32)
    names = list(train)

    def tracked() -> None:
        w = DriftWindow(references=profile.features, calibration=profile.calibration)
        for start in range(0, args.rows, args.batch):
            block = live[start:start + args.batch]
            w.add({n: block[:, i] for i, n in enumerate(names)})
            if w.full:
                w.close()

    def numeric_only() -> None:
        # The hot path alone: counting into the fixed bins, no statistics.
        for i, n in enumerate(names):
            ref = profile.features[n]
            for start in range(0, args.rows, args.batch):
                ref.count(live[start:start + args.batch, i])

    def copy_floor() -> None:
        for start in range(0, args.rows, args.batch):
            np.ascontiguousarray(live[start:start + args.batch].T).copy()

    cells = args.rows * args.features
    full = _best(tracked) / cells * 1e9
    counting = _best(numeric_only) / cells * 1e9
    floor = _best(copy_floor) / cells * 1e9
    print(f"rows {args.rows}, features {args.features}, window {args.window}")
    print(f"fit + calibrate a profile (20000 rows): {fit_s:.2f} s")
    print(f"tracking, all statistics (PSI, KS) per closed window: {full:.1f} ns/row/feature")
    print(f"counting alone (fixed bins):                          {counting:.1f} ns/row/feature")
    print(f"copying the same columns (floor):                     {floor:.1f} ns/row/feature")
    print(f"ratio tracking / counting: {full / counting:.2f}; counting / floor: "
          f"{counting / floor:.2f}")


if __name__ == "__main__":
    main()
