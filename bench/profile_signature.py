"""Profile the scorer's own work on signature models, without Kafka: ScoringCore.score on one
batch (decode into the signature, score, predictions), under cProfile; prints the time split
against the model alone on the same, already decoded batch.

Run: ``python bench/profile_signature.py [images-json|images-arrow|text-json|text-arrow|
textdefault-json|textdefault-arrow] [N]`` (``textdefault``: the ``text`` family at its default
sizes, ``bench_text.publish_default``).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_images
import bench_text


def main() -> None:
    from headrace.scorers.engine.core import ScoringCore
    from headrace.scorers.engine.models import load_model
    from headrace.streams import headers as hdr
    from headrace.streams.consuming import RawBatch

    what = sys.argv[1] if len(sys.argv) > 1 else "images-json"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    root = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    if what.startswith("images"):
        bench_images.publish(root, "cnn")
        name, rows = "cnn", 64
        imgs = bench_images.images(rows)
        values = (bench_images.json_records(imgs) if what.endswith("json")
                  else bench_images.arrow_messages(imgs, 32))
    else:  # text: the bench's small model, or (textdefault-*) the text family's default sizes
        if what.startswith("textdefault"):
            bench_text.publish_default(root)
            name = bench_text.DEFAULT_MODEL
        else:
            bench_text.publish(root)
            name = bench_text.MODEL
        rows = 8192
        texts = bench_text.corpus(rows)
        values = (bench_text.json_records(texts) if what.endswith("json")
                  else bench_text.arrow_messages(texts))
    ct = hdr.JSON if what.endswith("json") else hdr.ARROW
    model = load_model(root=root, name=name, alias="production", device="cpu", max_batch=rows)
    n = len(values)
    batch = RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.bench"] * n,
                     np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                     np.full(n, int(time.time() * 1000), np.int64),
                     [[("content-type", ct.encode())]] * n)
    core = ScoringCore()
    core.score(batch, model)
    from headrace.scorers.wire.inputs import decode_inputs

    arrays = decode_inputs(batch, model.signature, core.limits).arrays
    assert model.inputs_fn is not None
    t0 = time.perf_counter()
    for _ in range(reps):
        model.inputs_fn(arrays)
    alone = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        core.score(batch, model)
    plain = (time.perf_counter() - t0) / reps
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(reps):
        core.score(batch, model)
    prof.disable()
    whole = (time.perf_counter() - t0) / reps
    print(f"{what}: {rows} rows a batch; ScoringCore.score {whole * 1e3:.1f} ms "
          f"(profiled), {plain * 1e3:.1f} ms (not profiled), model alone {alone * 1e3:.1f} ms, "
          f"model share {alone / plain:.2f}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    _split(core, batch, model, reps)
    _cpu_split(core, batch, model, reps)
    _overlap(core, batch, model, reps)


def _split(core: Any, batch: Any, model: Any, reps: int) -> None:
    """Median ms of each step of ``ScoringCore.score`` timed alone (perf_counter, no
    profiler): decode into the signature, the model, formatting the predictions; "other" is
    the whole call less the three."""
    import statistics

    from headrace.scorers.wire.inputs import decode_inputs

    def ms(fn: Any) -> float:
        times = []
        for _ in range(max(reps, 5)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    decoded = decode_inputs(batch, model.signature, core.limits)
    ys = model.inputs_fn(decoded.arrays)
    whole = ms(lambda: core.score(batch, model))
    parts = {"decode": ms(lambda: decode_inputs(batch, model.signature, core.limits)),
             "model": ms(lambda: model.inputs_fn(decoded.arrays)),
             "format": ms(lambda: core.format(batch, model, decoded, ys))}
    parts["other"] = whole - sum(parts.values())
    print(f"split (median of {max(reps, 5)}, ms): score {whole:.1f} = "
          + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
          + f"; model share {parts['model'] / whole:.2f}")


def _cpu_split(core: Any, batch: Any, model: Any, reps: int) -> None:
    """CPU seconds (this process, every thread: TF's and Pillow's pools included) of each step,
    per batch. Where the cores are all busy (as on a machine shared with the broker), the
    model's share of the scorer's wall time cannot pass its share of the CPU, Kafka's work
    not even counted."""
    from headrace.scorers.wire.inputs import decode_inputs

    def cpu_ms(fn: Any) -> float:
        n = max(reps, 5)
        t0 = time.process_time()
        for _ in range(n):
            fn()
        return (time.process_time() - t0) / n * 1e3

    decoded = decode_inputs(batch, model.signature, core.limits)
    ys = model.inputs_fn(decoded.arrays)
    parts = {"decode": cpu_ms(lambda: decode_inputs(batch, model.signature, core.limits)),
             "model": cpu_ms(lambda: model.inputs_fn(decoded.arrays)),
             "format": cpu_ms(lambda: core.format(batch, model, decoded, ys))}
    total = sum(parts.values())
    print("CPU per batch (ms, all threads): " + ", ".join(f"{k} {v:.1f}"
                                                            for k, v in parts.items())
          + f"; on saturated cores the model share cannot pass {parts['model'] / total:.2f}")


def _overlap(core: Any, batch: Any, model: Any, reps: int) -> None:
    """``reps`` batches back to back as the scorer runs them: decoded inline (as before the
    signature decode-ahead), then decoded ahead in a thread while the batch before is scored."""
    from concurrent.futures import ThreadPoolExecutor

    from headrace.scorers.wire.inputs import decode_inputs

    t0 = time.perf_counter()
    for _ in range(reps):
        core.score(batch, model)
    inline = time.perf_counter() - t0
    with ThreadPoolExecutor(1) as pool:
        t0 = time.perf_counter()
        job = pool.submit(decode_inputs, batch, model.signature, core.limits)
        for k in range(reps):
            decoded = job.result()
            if k + 1 < reps:
                job = pool.submit(decode_inputs, batch, model.signature, core.limits)
            core.score(batch, model, decoded)
        ahead = time.perf_counter() - t0
    print(f"{reps} batches back to back: decoded inline {inline / reps * 1e3:.1f} ms a batch, "
          f"decoded ahead {ahead / reps * 1e3:.1f} ms a batch ({inline / ahead:.2f}x)")


if __name__ == "__main__":
    main()
