"""Imported models scored from the stream against their own libraries, same batches, one run.

Contenders (``python bench/bench_imported.py [--quick]``), each on the same rows (bench_scoring's
32 float features, Arrow messages of 4096 rows, on the embedded broker):

- ``lightgbm`` / ``xgboost``: a booster trained at its library's defaults on
  make_classification, saved in its own format, imported with ``headrace.imports`` (converted to
  ONNX by onnxmltools) and scored by the real scorer from a preloaded topic (rows/s in steady
  state), against the booster's own ``predict`` on the same 4096-row arrays in memory (no Kafka).
  Goal: stream / own predict >= 0.8.
- ``onnx``: an ONNX file from another producer (skl2onnx over an MLPClassifier, 50 epochs),
  imported and
  scored from the stream, against ONNX Runtime alone (``InferenceSession.run`` on the same
  arrays). Goal >= 0.8.
- The serving choice for boosters: the booster's ``predict`` against ONNX Runtime on the
  converted model, on the same arrays at the scorer's batch (4096) and at 256 rows.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_scoring import (
    ARROW_ROWS,
    FEATURES,
    _conn,
    arrow_messages,
    ensure,
    load_topic,
    make_records,
)


def batches(records: list[bytes]) -> list[np.ndarray]:
    """The rows of each Arrow message as the float32 matrix a library's predict takes."""
    import pyarrow as pa
    import pyarrow.json as pajson

    schema = pa.schema([(f, pa.float32()) for f in FEATURES])
    out = []
    for s in range(0, len(records), ARROW_ROWS):
        t = pajson.read_json(pa.py_buffer(b"\n".join(records[s:s + ARROW_ROWS])),
                             parse_options=pajson.ParseOptions(explicit_schema=schema))
        out.append(np.stack([t.column(f).to_numpy() for f in FEATURES], axis=1))
    return out


def in_memory(call: Callable[[np.ndarray], Any], arrays: list[np.ndarray], rounds: int) -> float:
    """Best rows/s of ``rounds`` passes over the arrays."""
    call(arrays[0])  # warm
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        for a in arrays:
            call(a)
        best = max(best, sum(len(a) for a in arrays) / (time.perf_counter() - t0))
    return best


def stream_rows_per_s(bootstrap: str, dfs: Path, model: str, values: list[bytes]) -> float:
    """The real scorer on a preloaded topic of ``values``: rows/s in steady state."""
    from headrace.core.settings import load_settings
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.serving import Scorer
    from headrace.streams import headers as hdr
    from headrace.streams.topics import data_topic, predictions_topic

    stream = f"bi{uuid.uuid4().hex[:8]}"
    ensure(bootstrap, data_topic(stream), predictions_topic(stream), f"data.{stream}.dlq")
    load_topic(bootstrap, data_topic(stream), values, hdr.ARROW)
    rows = len(values) * ARROW_ROWS
    settings = load_settings(bootstrap=bootstrap, dfs_root=dfs, streams=[stream], partitions=1)
    scorer = Scorer(settings, load_scorer_settings(
        stream=stream, model=model, partitions="0", http_port=0, http_host="127.0.0.1",
        batch_size=8192, max_wait_ms=10, device="cpu", idempotent=False),
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
        time.sleep(0.01)
    took = time.perf_counter() - t0
    stop.set()
    t.join(30)
    return (rows - first) / took


def train(kind: str, out: Path) -> Path:
    import pandas as pd
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=20_000, n_features=len(FEATURES), n_informative=12,
                               n_classes=3, random_state=7)
    frame = pd.DataFrame(x.astype(np.float32), columns=list(FEATURES))
    if kind == "lightgbm":
        import lightgbm as lgb

        lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1},
                  lgb.Dataset(frame, y)).save_model(str(out / "model.txt"))
        return out / "model.txt"
    if kind == "xgboost":
        import xgboost as xgb

        xgb.train({"objective": "multi:softprob", "num_class": 3},
                  xgb.DMatrix(frame, y)).save_model(str(out / "model.json"))
        return out / "model.json"
    import warnings

    from skl2onnx import to_onnx
    from sklearn.neural_network import MLPClassifier

    with warnings.catch_warnings():  # 50 epochs: a model to time, not to use
        warnings.simplefilter("ignore")
        mlp = MLPClassifier(random_state=0, max_iter=50).fit(x.astype(np.float32), y)
    (out / "model.onnx").write_bytes(to_onnx(mlp, x[:1].astype(np.float32)).SerializeToString())
    return out / "model.onnx"


def own_predict(kind: str, path: Path) -> Callable[[np.ndarray], Any]:
    if kind == "lightgbm":
        import lightgbm as lgb

        booster = lgb.Booster(model_file=str(path))
        return booster.predict
    if kind == "xgboost":
        import xgboost as xgb

        xb = xgb.Booster(model_file=str(path))
        return lambda a: xb.inplace_predict(a)
    return ort_call(path)


def ort_call(path: Path) -> Callable[[np.ndarray], Any]:
    import onnxruntime as ort

    from headrace.core.cpus import cpu_limit

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = cpu_limit()
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), sess_options=opts,
                                providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda a: sess.run(None, {name: a})


def run(*, quick: bool) -> None:
    from headrace.imports import ImportRequest, from_file, import_model
    from headrace.imports.declarations import declarations
    from headrace.streams.broker import EmbeddedBroker

    messages = 40 if quick else 200
    rounds = 2 if quick else 3
    records = make_records(messages * ARROW_ROWS)
    values = arrow_messages(records)
    arrays = batches(records)
    small = [a[s:s + 256] for a in arrays[:8] for s in range(0, len(a), 256)]
    broker = EmbeddedBroker().start()
    dfs = Path(tempfile.mkdtemp(prefix="bench-imported-"))
    work = Path(tempfile.mkdtemp(prefix="bench-imported-src-"))
    print(f"{len(values)} Arrow messages of {ARROW_ROWS} rows ({len(values) * ARROW_ROWS} rows),"
          f" {len(FEATURES)} features; best of {rounds} (embedded broker, shared 2-core box)",
          flush=True)
    try:
        for kind in ("lightgbm", "xgboost", "onnx"):
            src = work / kind
            src.mkdir()
            path = train(kind, src)
            decl = declarations(["X:numeric=" + ",".join(FEATURES)] if kind == "onnx" else [],
                                None)
            result = import_model(root=dfs, request=ImportRequest(
                source=from_file(path), name=kind, declared=decl, promote=True))
            served = result.version.path / "model.onnx"
            own = own_predict(kind, path)
            base = in_memory(own, arrays, rounds)
            stream = max(stream_rows_per_s(broker.bootstrap, dfs, kind, values)
                         for _ in range(rounds))
            what = "ONNX Runtime alone" if kind == "onnx" else f"{kind}'s own predict"
            print(f"{kind}: stream {stream:,.0f} rows/s, {what} {base:,.0f} rows/s on the same "
                  f"batches: ratio {stream / base:.2f} (goal >= 0.8)", flush=True)
            if kind != "onnx":
                onnx_big = in_memory(ort_call(served), arrays, rounds)
                own_small = in_memory(own, small, rounds)
                onnx_small = in_memory(ort_call(served), small, rounds)
                print(f"  serving choice: own predict {base:,.0f} vs ONNX Runtime "
                      f"{onnx_big:,.0f} rows/s at 4096 rows; {own_small:,.0f} vs "
                      f"{onnx_small:,.0f} at 256", flush=True)
    finally:
        broker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a minute or two)")
    run(quick=p.parse_args().quick)


if __name__ == "__main__":
    main()
