"""Where a shadow's time goes, in process (no Kafka): bench_scoring's MLP and its shadow
candidate (a second version, same shape) on one JSON batch (8,192 records) and one Arrow batch
(16 messages of 4,096 rows), production alone vs production + the shadow tap, and the tap's
work split into its steps (perf_counter, median of ``--rounds`` batches, run alternately):

  prod        production's decode + model + predictions (``ScoringCore.score``)
  cand.model  the candidate's model call on production's decoded rows
  cand.check  its shape and non-finite check
  cand.format its predictions for predictions.<stream>.shadow (production's encoders)
  start       ``after_scoring``'s own work (keeping production's rows)
  pair        pairing the two versions' rows, top classes, by partition (candidate's thread)
  count       adding them to the live comparison, the snapshots (scoring thread)

    python bench/profile_shadow.py [--rounds 15] [--cprofile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scoring as bs


def _batch(values: list[bytes], content_type: str) -> Any:
    from headrace.streams.consuming import RawBatch

    n = len(values)
    return RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.bench"] * n,
                    np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                    np.full(n, int(time.time() * 1000), np.int64),
                    [[("content-type", content_type.encode())]] * n)


def _tap(dfs: Path, stream: str) -> Any:
    """The real ShadowTap, its candidate loaded, without Kafka (no follower, no labels)."""
    from headrace.core.settings import load_settings
    from headrace.scorers.engine.metrics import ScorerMetrics
    from headrace.scorers.engine.models import Sizing, load_ref
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.engine.taps import TapContext
    from headrace.scorers.rollout.shadow_tap import ShadowTap

    settings = load_settings(bootstrap="unused:9092", dfs_root=str(dfs), streams=[stream],
                             partitions=1)
    scorer = load_scorer_settings(stream=stream, model=bs.MODEL, partitions="0", http_port=0,
                                  http_host="127.0.0.1", batch_size=65536, max_wait_ms=10,
                                  device="cpu")
    ctx = TapContext(settings, scorer, None, ScorerMetrics(stream=stream, model=bs.MODEL))
    tap = ShadowTap(ctx, None, None)  # type: ignore[arg-type]
    cand = load_ref(root=dfs, ref=f"{bs.MODEL}:2", device="cpu", max_batch=65536,
                    sizes=Sizing())
    tap.wanted = lambda: 2  # type: ignore[method-assign]
    tap.loader.want = lambda name, version, wait=False: cand  # type: ignore[method-assign]
    return tap, cand


def _split(core: Any, tap: Any, cand: Any, model: Any, batch: Any, times: dict[str, list[float]]
           ) -> None:
    """The tap's steps one by one, on this thread (what the tap runs, in its order)."""
    from headrace.scorers.engine.taps import Scored
    from headrace.scorers.rollout.candidate import inputs_for
    from headrace.scorers.rollout.shadow_rows import Production, pair_rows
    from headrace.scorers.rollout.shadow_tap import _Handoff, _Started

    def lap(name: str, t: float) -> float:
        now = time.perf_counter()
        times.setdefault(name, []).append((now - t) * 1000)
        return now

    t = time.perf_counter()
    out = core.score(batch, model)
    t = lap("prod", t)
    scored = Scored(batch, model, out, out.inputs, out.scores)
    inputs, _ = inputs_for(cand, model, scored.inputs, batch, core.limits)
    y = np.asarray(cand.fn(inputs.x), np.float32)
    t = lap("cand.model", t)
    assert np.isfinite(y).all()
    t = lap("cand.check", t)
    core.format(batch, cand, inputs, [y])
    t = lap("cand.format", t)
    comp = tap._pair(model, cand)
    pm = scored.messages()
    prod = Production(pm, np.asarray(scored.inputs.row, np.int64),
                      scored.scores[0].reshape(len(pm), -1), [])
    st = _Started(out=out, batch=batch, cand=cand, comp=comp, prod=prod, job=None,
                  handoff=_Handoff(), reason="", budget=1.0, started=time.perf_counter())
    t = lap("start", t)
    cmap = tap._maps[(comp.pair.production_version, comp.pair.candidate_version)]
    rows = pair_rows(batch, prod, cmap, np.asarray(inputs.message, np.int64),
                     np.asarray(inputs.row, np.int64), y)
    t = lap("pair", t)
    tap._count(comp, st, rows, out)
    lap("count", t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cprofile", action="store_true", help="also a cProfile of the tap's steps")
    a = p.parse_args()
    from headrace.scorers.engine.core import ScoringCore
    from headrace.scorers.engine.models import load_model
    from headrace.scorers.engine.taps import Scored
    from headrace.streams import headers as hdr

    dfs = Path(tempfile.mkdtemp(prefix="profile-shadow-"))
    bs.publish_model(dfs)
    model = load_model(root=dfs, name=bs.MODEL, alias="production", device="cpu",
                       max_batch=65536)
    recs = bs.make_records(16 * bs.ARROW_ROWS)
    batches = {"JSON 8192 rows": _batch(recs[:8192], hdr.JSON),
               "Arrow 16 x 4096 rows": _batch(bs.arrow_messages(recs), hdr.ARROW)}
    tap, cand = _tap(dfs, "bprof")
    core = ScoringCore()
    for kind, batch in batches.items():
        off: list[float] = []
        on: list[float] = []
        steps: dict[str, list[float]] = {}
        for _ in range(3):  # warm
            _split(core, tap, cand, model, batch, {})
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            core.score(batch, model)
            off.append((time.perf_counter() - t0) * 1000)
            # The tap as the scorer runs it: the candidate in its thread, collected at once.
            t0 = time.perf_counter()
            out = core.score(batch, model)
            tap.after_scoring(Scored(batch, model, out, out.inputs, out.scores))
            tap.before_delivery(out)
            on.append((time.perf_counter() - t0) * 1000)
            _split(core, tap, cand, model, batch, steps)
        rows = sum(1 for _ in range(len(batch))) if kind.startswith("JSON") else 16 * 4096
        print(f"\n{kind}: production alone {statistics.median(off):.2f} ms, production + "
              f"shadow tap (waited for) {statistics.median(on):.2f} ms "
              f"({rows / statistics.median(off) * 1000:,.0f} vs "
              f"{rows / statistics.median(on) * 1000:,.0f} rows/s on one thread)")
        total = sum(statistics.median(v) for k, v in steps.items() if k != "prod")
        for k, v in steps.items():
            m = statistics.median(v)
            share = "" if k == "prod" else f"  {m / total:5.0%} of the tap"
            print(f"  {k:12} {m:7.2f} ms{share}")
        if a.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(5):
                _split(core, tap, cand, model, batch, {})
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    tap.close()


if __name__ == "__main__":
    main()
