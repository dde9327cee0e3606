"""Prometheus metrics of one scorer, in its own registry (several scorers can share a process).

Per-row latencies are recorded with numpy (``VectorHistogram``), not one ``observe`` call a row.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from headrace.core.quantiles import bucket_quantile

# Steps of ~10-25% from 1 ms to 300 s: a p99 between 10 and 100 ms lands in a bucket a few ms
# wide (and is interpolated inside it), and a backlog of minutes still has a bound.
LATENCY_BUCKETS = (0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.0125, 0.015, 0.0175,
                   0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.125,
                   0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
                   15.0, 30.0, 60.0, 120.0, 300.0)
BATCH_BUCKETS = (1, 8, 64, 256, 1024, 4096, 8192, 16384, 65536, 262144, 1048576)


class VectorHistogram(Collector):
    """A histogram fed whole arrays at once."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...],
                 labels: dict[str, str]) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.bounds = np.asarray(buckets, np.float64)
        self.counts = np.zeros(len(buckets) + 1, np.int64)  # last: +Inf
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe_many(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        if len(values) == 0:
            return
        idx = np.searchsorted(self.bounds, values, side="left")
        w = None if weights is None else weights.astype(np.int64)
        add = np.bincount(idx, weights=w, minlength=len(self.counts)).astype(np.int64)
        total = float(np.dot(values, w)) if w is not None else float(values.sum())
        with self._lock:
            self.counts += add
            self.sum += total

    def quantile(self, q: float) -> float:
        """Quantile ``q`` interpolated inside its bucket (for logs and tests); 0 when empty."""
        with self._lock:
            cum = np.cumsum(self.counts)
        points = [*zip(self.bounds.tolist(), cum[:-1].tolist(), strict=True),
                  (float("inf"), float(cum[-1]))]
        value = bucket_quantile(points, q)
        return 0.0 if value is None else value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            cum = np.cumsum(self.counts)
            total = self.sum
        fam = HistogramMetricFamily(self.name, self.doc, labels=list(self.labels))
        buckets = [(repr(float(b)), int(c)) for b, c in zip(self.bounds, cum[:-1], strict=True)]
        buckets.append(("+Inf", int(cum[-1])))
        fam.add_metric(list(self.labels.values()), buckets, total)
        yield fam


class ScorerMetrics:
    def __init__(self, *, stream: str, model: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        lab = {"stream": stream}
        self.stream = stream
        self.rows = Counter("headrace_scorer_rows", "Rows scored and published (rate = rows/s).",
                            ["stream"], registry=r).labels(**lab)
        self.messages = Counter("headrace_scorer_messages", "Input messages handled.",
                                ["stream"], registry=r).labels(**lab)
        self.dead_letters = Counter("headrace_scorer_dead_letters",
                                    "Inputs sent to the DLQ, by stage.", ["stream", "stage"],
                                    registry=r)
        self.batch_rows = Histogram("headrace_scorer_batch_rows", "Rows per micro-batch.",
                                    ["stream"], buckets=BATCH_BUCKETS, registry=r).labels(**lab)
        self.batch_seconds = Histogram("headrace_scorer_batch_seconds",
                                       "Time to decode, score, produce and commit a batch.",
                                       ["stream"], buckets=LATENCY_BUCKETS,
                                       registry=r).labels(**lab)
        self.latency = VectorHistogram(
            "headrace_scorer_latency_seconds",
            "From the input record's CreateTime to its prediction being acknowledged.",
            LATENCY_BUCKETS, lab)
        r.register(self.latency)
        # The latency above, split where the scorer received the record: waiting (in the
        # topic, behind a backlog or a scorer that was not running) and scoring.
        self.waiting = VectorHistogram(
            "headrace_scorer_wait_seconds",
            "From the input record's CreateTime to the scorer receiving it (time in the topic).",
            LATENCY_BUCKETS, lab)
        r.register(self.waiting)
        self.scoring = VectorHistogram(
            "headrace_scorer_scoring_seconds",
            "From the scorer receiving the input record to its prediction being acknowledged.",
            LATENCY_BUCKETS, lab)
        r.register(self.scoring)
        self.lag = Gauge("headrace_scorer_consumer_lag",
                         "High watermark - position per partition (under-reported on Tansu, "
                         "whose high watermark after a multi-record batch is too low).",
                         ["stream", "topic", "partition"], registry=r)
        self.lag_unanswered = Counter(
            "headrace_scorer_lag_unanswered_partitions",
            "Partitions the broker gave no end offset for in a lag read, after a metadata "
            "refresh (while it grows, the stall check cannot see those partitions).",
            ["stream"], registry=r).labels(**lab)
        self.model_version = Gauge("headrace_scorer_model_version",
                                   "Version of the model now serving.", ["model"], registry=r)
        self.model_swaps = Counter("headrace_scorer_model_swaps", "Model versions swapped in.",
                                   ["model"], registry=r)
        self.precision_agreement = Gauge(
            "headrace_scorer_precision_agreement",
            "Share of sampled rows whose label under --precision bf16/fp16 equals fp32's "
            "(the serving version; NaN before a comparison or in fp32).", ["model"],
            registry=r)
        self.model_load_failures = Counter(
            "headrace_scorer_model_load_failures",
            "Model versions refused (integrity, load or warm-up failure) or unreadable.",
            ["model", "reason"], registry=r)
        self.commits = Counter("headrace_scorer_commits", "Offset commits (or transactions).",
                               ["stream"], registry=r).labels(**lab)
        self.decoded_ahead = Counter(
            "headrace_scorer_decoded_ahead",
            "Records decoded ahead of scoring (JSON in the decode helpers; inputs of signature "
            "models in a thread).",
            ["stream"], registry=r).labels(**lab)
        self.image_conversions = Counter(
            "headrace_scorer_image_conversions",
            "Images whose channels were converted to the model's (e.g. L->RGB: a grey image "
            "into a colour model), by conversion; often a silent loss of quality.",
            ["stream", "conversion"], registry=r)
        self.retries = Counter("headrace_scorer_retries", "Transient failures retried.",
                               ["stream", "what"], registry=r)
        self.tap_errors = Counter("headrace_scorer_tap_errors",
                                  "Batches a tap (drift, shadow, lineage) failed on; production "
                                  "was scored and published all the same.", ["stream", "tap"],
                                  registry=r)
        self.side_refused = Counter("headrace_scorer_side_outputs_refused",
                                    "Tap outputs the producer refused (dropped), by topic.",
                                    ["stream", "topic"], registry=r)
        self.ready = Gauge("headrace_scorer_ready", "1 when /readyz is OK.", ["stream"],
                           registry=r).labels(**lab)
        self.live = Gauge("headrace_scorer_live", "1 when /livez is OK.", ["stream"],
                          registry=r).labels(**lab)
        self.stalled = Gauge(
            "headrace_scorer_stalled",
            "1 while the scorer holds partitions with unconsumed records and has consumed "
            "nothing for HEADRACE_SCORER_STALL_S (/livez and /readyz fail).",
            ["stream"], registry=r).labels(**lab)
        self.probe_failing = Gauge(
            "headrace_scorer_probe_failing",
            "1 while a probe fails for this reason (starting, loading, no_model, "
            "no_partitions, stalled, stopping, loop_stuck).",
            ["stream", "probe", "reason"], registry=r)
        self.model = model
