"""The shadow's /metrics, in the scorer's registry: what the candidate cost and dropped, and the
live comparison of each (production, candidate) pair over this scorer's partitions."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from headrace.scorers.engine.metrics import LATENCY_BUCKETS, ScorerMetrics
from headrace.scorers.rollout.label_join import JoinStats
from headrace.scorers.rollout.live_counts import LiveComparison


class ShadowMetrics:
    def __init__(self, metrics: ScorerMetrics,
                 comparisons: Callable[[], list[LiveComparison]],
                 join_stats: Callable[[], JoinStats]) -> None:
        r = metrics.registry
        self.stream = metrics.stream
        self.dropped = Counter(
            "headrace_shadow_dropped_rows",
            "Rows the shadow candidate did not predict, by reason: budget (over the time "
            "budget), busy (still on an earlier batch), error (it raised), nonfinite, loading "
            "(not loaded yet: these rows are not in the live comparison); "
            "production was published all the same.", ["stream", "candidate", "reason"],
            registry=r)
        self.rows = Counter("headrace_shadow_rows", "Rows the shadow candidate predicted.",
                            ["stream", "candidate"], registry=r)
        self.decoded_again = Counter(
            "headrace_shadow_decoded_again",
            "Batches decoded a second time because the candidate's inputs differ from "
            "production's.", ["stream"], registry=r).labels(stream=self.stream)
        self.seconds = Histogram(
            "headrace_shadow_seconds",
            "The candidate's time on a batch (inputs, model, predictions).", ["stream"],
            buckets=LATENCY_BUCKETS, registry=r).labels(stream=self.stream)
        self.waited = Histogram(
            "headrace_shadow_wait_seconds",
            "How long production waited for the candidate on a batch (at most the budget).",
            ["stream"], buckets=LATENCY_BUCKETS, registry=r).labels(stream=self.stream)
        r.register(_LiveCollector(self.stream, comparisons, join_stats))


class _LiveCollector(Collector):
    """Gauges computed from the pairs' counts at scrape time."""

    def __init__(self, stream: str, comparisons: Callable[[], list[LiveComparison]],
                 join_stats: Callable[[], JoinStats]) -> None:
        self.stream, self.comparisons, self.join_stats = stream, comparisons, join_stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["stream", "model", "production", "candidate"]
        rows = GaugeMetricFamily("headrace_live_rows",
                                 "Records both versions predicted (this scorer's partitions).",
                                 labels=labels)
        agree = GaugeMetricFamily("headrace_live_agreement",
                                  "Share of those records on which both versions agree.",
                                  labels=labels)
        matrix = GaugeMetricFamily(
            "headrace_live_confusion",
            "Records production called production_label and the candidate candidate_label.",
            labels=[*labels, "production_label", "candidate_label"])
        estimate = GaugeMetricFamily(
            "headrace_live_estimated_accuracy",
            "CBPE estimate (mean top-class probability; valid for a calibrated model) before "
            "labels: an estimate, not a measurement.", labels=[*labels, "version"])
        accuracy = GaugeMetricFamily(
            "headrace_live_accuracy", "Accuracy on the records whose labels arrived.",
            labels=[*labels, "version"])
        labelled = GaugeMetricFamily("headrace_live_labelled",
                                     "Records joined to their label.", labels=labels)
        errors = GaugeMetricFamily("headrace_live_candidate_errors",
                                   "Records the candidate failed on or was dropped for.",
                                   labels=labels)
        for comp in self.comparisons():
            pr = comp.pair
            lab = [self.stream, pr.model_name, str(pr.production_version),
                   str(pr.candidate_version)]
            t = comp.total()
            rows.add_metric(lab, t.rows)
            errors.add_metric(lab, t.candidate_errors)
            labelled.add_metric(lab, t.labelled)
            if t.rows:
                agree.add_metric(lab, float(t.matrix.trace()) / t.rows)
                estimate.add_metric([*lab, "production"], t.production_confidence / t.rows)
                estimate.add_metric([*lab, "candidate"], t.candidate_confidence / t.rows)
            for i, a in enumerate(comp.classes):
                for j, b in enumerate(comp.classes):
                    if t.matrix[i, j]:
                        matrix.add_metric([*lab, a, b], int(t.matrix[i, j]))
            if t.labelled:
                accuracy.add_metric([*lab, "production"],
                                    float(t.production_truth.trace()) / t.labelled)
                accuracy.add_metric([*lab, "candidate"],
                                    float(t.candidate_truth.trace()) / t.labelled)
        joins = GaugeMetricFamily(
            "headrace_shadow_labels",
            "Labels from labels.<stream> by outcome: joined, unmatched (no prediction in the "
            "window), expired (predictions whose label never came), unknown (no such class), "
            "bad (no label at all: not JSON, no key, a tombstone; skipped).",
            labels=["stream", "outcome"])
        st = self.join_stats()
        for outcome in ("joined", "unmatched", "expired", "unknown", "bad"):
            joins.add_metric([self.stream, outcome], getattr(st, outcome))
        yield from (rows, agree, matrix, estimate, accuracy, labelled, errors, joins)
