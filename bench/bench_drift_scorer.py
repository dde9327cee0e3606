"""The real scorer with its drift tap on vs off (``python bench/bench_drift.py --scorer``)."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from bench_scoring import (
    ARROW_ROWS,
    CLASSES,
    FEATURES,
    MODEL,
    _conn,
    arrow_messages,
    ensure,
    load_topic,
    make_records,
)


def publish_with_profile(dfs: Path, window: int) -> int:
    """bench_scoring's MLP, published with a drift profile fitted on rows of the records'
    distribution (as a trainer writes it: beside the model, hashed in the manifest)."""
    import keras

    from headrace.drift.fitting import PROFILE_FILE, fit_profile
    from headrace.drift.summaries import ProfiledInput
    from headrace.store.manifest import Manifest
    from headrace.store.versions import publish, set_alias

    rng = np.random.default_rng(1)
    train = {f: rng.normal(size=20_000).astype(np.float32) for f in FEATURES}
    profile = fit_profile(train, window=window).model_copy(update={
        "inputs": (ProfiledInput(name="features", kind="numeric", columns=FEATURES),),
        "classes": CLASSES})
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((len(FEATURES),)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(len(CLASSES), activation="softmax"),
    ])

    def write(d: Path) -> None:
        model.save(d / "model.keras")
        (d / PROFILE_FILE).write_text(profile.model_dump_json())

    mv = publish(dfs, Manifest(name=MODEL, framework="tensorflow", task="classifier",
                               features=FEATURES, label="y", classes=CLASSES), write)
    set_alias(dfs, MODEL, mv.version)
    return len(profile.features)


def scorer_rows_per_s(bootstrap: str, dfs: Path, stream: str, rows: int, *, drift: bool,
                      rows_per_batch: int) -> tuple[float, float]:
    """(rows/s in steady state, drift windows closed) of one run on a preloaded stream."""
    from headrace.core.settings import load_settings
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.serving import Scorer

    settings = load_settings(bootstrap=bootstrap, dfs_root=dfs, streams=[stream], partitions=1)
    scorer = Scorer(settings, load_scorer_settings(
        stream=stream, model=MODEL, partitions="0", http_port=0, http_host="127.0.0.1",
        batch_size=8192, max_wait_ms=10, device="cpu", idempotent=False,
        drift={"enabled": drift, "rows_per_batch": rows_per_batch}),
        conn=_conn(bootstrap))
    stop = threading.Event()
    t = threading.Thread(target=scorer.run, args=(stop,), daemon=True)
    t.start()
    reg = scorer.metrics.registry

    def scored() -> float:
        if not t.is_alive():
            raise SystemExit("scorer died")
        return reg.get_sample_value("headrace_scorer_rows_total", {"stream": stream}) or 0.0

    while (first := scored()) == 0:
        time.sleep(0.002)
    t0 = time.perf_counter()
    while scored() < rows:
        time.sleep(0.02)
    took = time.perf_counter() - t0
    windows = sum(reg.get_sample_value("headrace_scorer_drift_windows_total",
                                       {"stream": stream, "full": f}) or 0.0
                  for f in ("true", "false")) if drift else 0.0
    stop.set()
    t.join(30)
    return (rows - first) / took, windows


def run(*, quick: bool, window: int, rows_per_batch: int) -> None:
    from headrace.streams import headers as hdr
    from headrace.streams.broker import EmbeddedBroker
    from headrace.streams.topics import data_topic, predictions_topic

    messages = 150 if quick else 600
    rounds = 2 if quick else 3
    broker = EmbeddedBroker().start()
    dfs = Path(tempfile.mkdtemp(prefix="bench-drift-"))
    try:
        n_features = publish_with_profile(dfs, window)
        arrow = arrow_messages(make_records(messages * ARROW_ROWS))
        rows = len(arrow) * ARROW_ROWS
        best: dict[bool, float] = {True: 0.0, False: 0.0}
        info: dict[str, Any] = {}
        for r in range(rounds):
            for drift in (False, True) if r % 2 == 0 else (True, False):
                s = f"bd{uuid.uuid4().hex[:8]}"
                ensure(broker.bootstrap, data_topic(s), predictions_topic(s), f"data.{s}.dlq")
                load_topic(broker.bootstrap, data_topic(s), arrow, hdr.ARROW)
                rate, windows = scorer_rows_per_s(broker.bootstrap, dfs, s, rows, drift=drift,
                                                  rows_per_batch=rows_per_batch)
                print(f"round {r + 1}: drift {'on ' if drift else 'off'} {rate:,.0f} rows/s"
                      + (f" ({windows:.0f} windows)" if drift else ""), flush=True)
                best[drift] = max(best[drift], rate)
                info[f"windows_{r}"] = windows
        ratio = best[True] / best[False]
        ns = (1 / best[True] - 1 / best[False]) * 1e9 / n_features
        print(f"rows {rows} ({len(arrow)} Arrow messages, batches of 8192), drift features "
              f"{n_features}, window {window}, at most {rows_per_batch} rows counted a batch")
        print(f"best rows/s: drift off {best[False]:,.0f}, on {best[True]:,.0f}; "
              f"ratio on/off {ratio:.3f} (goal >= 0.95)")
        print(f"extra cost with drift on: {ns:.1f} ns per row and feature (goal <= 30)")
    finally:
        broker.stop()
