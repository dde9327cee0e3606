"""Helpers shared by the signature benches (images, text): child processes, the real scorer as a
contender, paced latency runs. Kafka and timing helpers come from bench_scoring unchanged."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scoring import (
    _conn,
    _rss_mib,
    child_result,
    ensure,
    latencies,
    load_topic,
    paced_send,
)

__all__ = ["_conn", "_rss_mib", "ensure", "latencies", "load_topic", "paced_send"]


def tree_rss_mib(pid: int) -> float:
    """Peak RSS of a process and its live children (VmHWM each)."""
    total = _rss_mib(pid)
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return total + sum(tree_rss_mib(int(k)) for k in kids)


def run_child(script: str, name: str, *, during: Callable[[], None] | None = None,
              timeout_s: float = 900, **kw: Any) -> dict[str, Any]:
    """Run ``script --contender name --k v ...``; its last ``RESULT {json}`` line is the result
    (a failed contender is reported, not raised). ``during``: a paced upstream, from READY."""
    result, code = child_result(script, name, during=during, timeout_s=timeout_s, **kw)
    if result is None:
        return {"error": f"exit {code}", "rows": 0, "seconds": 1.0, "rss_mib": 0.0}
    return result


MODEL_SECONDS = [0.0]  # time inside the scorer's model calls, this process


def _time_model_calls() -> None:
    """Wrap the loaded model's ``inputs_fn`` with a timer (bench-side, the scorer untouched):
    the model's share of the scorer's wall time is Headrace / model-alone measured in the same
    process at the same moment, which a shared, loaded box cannot give across two runs."""
    import dataclasses

    from headrace.scorers.engine import swapping

    real = swapping.load_model

    def load_model(**kw: Any) -> Any:
        model = real(**kw)
        fn = model.inputs_fn
        if fn is None:
            return model

        def timed(inputs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(inputs)
            finally:
                MODEL_SECONDS[0] += time.perf_counter() - t

        return dataclasses.replace(model, inputs_fn=timed)

    swapping.load_model = load_model  # type: ignore[assignment]


def headrace_scorer(*, bootstrap: str, dfs: str, stream: str, model: str, rows: int,
                    batch_size: int, max_wait_ms: int, idempotent: bool,
                    shadow: bool = False) -> dict[str, Any]:
    """The real scorer on a preloaded (or paced) stream; the clock starts at its first batch
    out (steady state), as in bench_scoring; decode helpers' RSS is added. ``shadow``: version
    2 of the model shadows production on the stream."""
    from headrace.core.settings import load_settings
    from headrace.scorers.engine.settings import load_scorer_settings
    from headrace.scorers.serving import Scorer

    _time_model_calls()
    settings = load_settings(bootstrap=bootstrap, dfs_root=dfs, streams=[stream], partitions=1)
    if shadow:
        from pathlib import Path

        from headrace.ops.rollout.control import start_shadow
        from headrace.streams.topics import ControlTopics

        start_shadow(root=Path(dfs), conn=_conn(bootstrap), ref=f"{model}:2", stream=stream,
                     topics=ControlTopics.of(settings))
    scorer = Scorer(settings, load_scorer_settings(
        stream=stream, model=model, partitions="0", http_port=0, http_host="127.0.0.1",
        batch_size=batch_size, max_wait_ms=max_wait_ms, device="cpu", idempotent=idempotent),
        conn=_conn(bootstrap))
    stop = threading.Event()
    t = threading.Thread(target=scorer.run, args=(stop,), daemon=True)
    t.start()
    while not scorer.state.ready()[0]:
        if not t.is_alive():
            raise SystemExit("scorer died before it was ready")
        time.sleep(0.01)
    print("READY", flush=True)
    reg = scorer.metrics.registry

    def scored() -> float:
        if not t.is_alive():
            raise SystemExit("scorer died")
        return reg.get_sample_value("headrace_scorer_rows_total", {"stream": stream}) or 0.0

    while (first := scored()) == 0:
        time.sleep(0.002)
    t0, m0 = time.perf_counter(), MODEL_SECONDS[0]
    while scored() < rows:
        time.sleep(0.02)  # rare wake-ups: each one takes the GIL from the scorer
    took = time.perf_counter() - t0
    model_s = MODEL_SECONDS[0] - m0
    # Records decoded ahead (helpers or thread) vs consumed: on a preloaded stream the scorer
    # is behind, so every batch but the first should be.
    ahead = reg.get_sample_value("headrace_scorer_decoded_ahead_total", {"stream": stream}) or 0.0
    consumed = reg.get_sample_value("headrace_scorer_messages_total", {"stream": stream}) or 0.0
    decoders = scorer.worker.decoders if scorer.worker is not None else None
    helpers = sum(_rss_mib(pid) for pid in (decoders.pids if decoders else []))
    stop.set()
    t.join(30)
    return {"rows": rows - first, "seconds": took, "extra_rss_mib": helpers,
            "model_s": model_s, "decoded_ahead": ahead, "messages": consumed}


def timed_batches(call: Callable[[], int], rows: int) -> dict[str, Any]:
    """The model alone: ``call`` (one batch; returns its rows) once to warm up, then timed until
    ``rows`` rows are done."""
    call()
    n, t0 = 0, time.perf_counter()
    while n < rows:
        n += call()
    return {"rows": n, "seconds": time.perf_counter() - t0}


# -- the per-message contenders: one record, one model call, one output ------------------------
def _per_message(a: Any, scores_of: Callable[[bytes], np.ndarray],
                 render: Callable[[Any, np.ndarray], dict[str, Any]], *, group: str,
                 auto_commit: bool) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    from headrace.streams.clients import make_consumer, make_producer

    conn = _conn(a.bootstrap)
    commits = {"enable.auto.commit": True} if auto_commit else {}
    consumer = make_consumer(conn, f"{group}-{uuid.uuid4().hex}",
                             **commits, **{"enable.auto.offset.store": True})
    consumer.assign([TopicPartition(a.input, 0, 0)])
    producer = make_producer(conn)
    print("READY", flush=True)
    n, t0 = 0, None
    while n < a.rows:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        t0 = t0 or time.perf_counter()
        scores = scores_of(msg.value())
        producer.produce(a.output, json.dumps(render(msg, scores)).encode(), msg.key())
        n += 1
        if auto_commit:
            producer.poll(0)
        elif n % 16 == 0:
            producer.flush()
            consumer.commit(asynchronous=False)
    producer.flush()
    if not auto_commit and n % 16:  # nothing stored since the last commit otherwise
        consumer.commit(asynchronous=False)
    return {"rows": n, "seconds": time.perf_counter() - (t0 or time.perf_counter())}


def kafka_ml_loop(a: Any, scores_of: Callable[[bytes], np.ndarray],
                  classes: tuple[str, ...]) -> dict[str, Any]:
    """Kafka-ML's inference loop: poll one message, ``scores_of`` it (decode + model.predict),
    json.dumps, produce; flush + commit synchronously every 16 messages."""
    return _per_message(a, scores_of, lambda msg, scores: {
        "key": msg.key().decode(), "offset": msg.offset(), "scores": [float(s) for s in scores],
        "label": classes[int(np.argmax(scores))]}, group="kafkaml", auto_commit=False)


def per_message_app_loop(a: Any, scores_of: Callable[[bytes], np.ndarray],
                         classes: tuple[str, ...]) -> dict[str, Any]:
    """The loop most Python apps write: consume one message, ``scores_of`` it (decode +
    ``model(x)``), produce the label; auto commit."""
    return _per_message(a, scores_of, lambda _msg, scores: {
        "label": classes[int(np.argmax(scores))], "score": float(scores.max())},
        group="app", auto_commit=True)


def stream_topics(bootstrap: str, tag: str) -> tuple[str, str, str]:
    from headrace.streams.topics import data_topic, predictions_topic

    s = f"b{tag}{uuid.uuid4().hex[:8]}"
    ensure(bootstrap, data_topic(s), predictions_topic(s), f"data.{s}.dlq")
    return s, data_topic(s), predictions_topic(s)


def paced(script: str, contender: str, values: list[bytes], content_type: str,
          rows_per_msg: int, rate: float, *, bootstrap: str, warm_s: float = 2.0,
          headers: list[tuple[str, bytes]] | None = None,
          **kw: Any) -> tuple[float, float, dict[str, Any]]:
    """Offer ``rate`` rows/s: ``warm_s`` of warm-up messages (keys ``w…``), then the measured
    ones (``m…``); p50/p99 ms over the measured ones, input CreateTime -> output CreateTime."""
    s, i, o = stream_topics(bootstrap, "p")
    warm = values[:max(1, int(warm_s * rate / rows_per_msg))]

    def send() -> None:
        # Any headers (an MLServer request names its model in one; its producer is the
        # bench's own, not idempotent), else the content type from an upstream producer.
        paced_send(bootstrap, i, [("w", warm), ("m", values)],
                   headers or [("content-type", content_type.encode())], rate / rows_per_msg,
                   idempotent=headers is None and bool(kw.get("idempotent")),
                   upstream=headers is None)

    rows = (len(warm) + len(values)) * rows_per_msg
    res = run_child(script, contender, stream=s, input=i, output=o, rows=rows, during=send,
                    bootstrap=bootstrap, **kw)
    p50, p99 = latencies(bootstrap, i, o, len(warm) + len(values), measured_prefix="m")
    return p50, p99, res


def table(results: dict[str, dict[str, Any]], unit: str, ref: str | None) -> None:
    rate = {k: v["rows"] / max(v["seconds"], 1e-9) for k, v in results.items()}
    base = rate.get(ref or "", 0.0)
    print(f"{'contender':46} {unit:>9} {unit + '/s':>11} {'/ model':>8} {'peak RSS MiB':>13} "
          "model share")
    for k, v in results.items():
        if "error" in v:
            print(f"{k:46} {'failed: ' + v['error']:>44}")
            continue
        ratio = f"{rate[k] / base:8.2f}" if base else f"{'':8}"
        share = f"{v['model_s'] / v['seconds']:6.2f}" if v.get("model_s") else ""
        print(f"{k:46} {int(v['rows']):>9} {rate[k]:>11,.1f} {ratio} {v['rss_mib']:>13,.0f} "
              f"{share}")
    for k, v in results.items():
        if v.get("messages"):
            print(f"  {k}: {int(v['decoded_ahead']):,} records decoded ahead, "
                  f"{int(v['messages']):,} messages consumed")


def model_share_note() -> None:
    print("model share: the scorer's time inside model calls / its wall time, same process, "
          "same moment (= Headrace / model alone, free of the box's drift)")


def latency_table(paced_results: dict[str, tuple[float, float, dict[str, Any]]],
                  rate: float, unit: str) -> None:
    print(f"latency at an offered {rate:,.0f} {unit}/s (input CreateTime -> output CreateTime):")
    print(f"{'contender':46} {'p50 ms':>8} {'p99 ms':>8} {'peak RSS MiB':>13}")
    for k, (p50, p99, res) in paced_results.items():
        if "error" in res:
            print(f"{k:46} failed: {res['error']}")
            continue
        print(f"{k:46} {p50:>8.1f} {p99:>8.1f} {res.get('rss_mib', 0.0):>13,.0f}")


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")
