"""The canary's counts on the scorer's /metrics: records per arm (candidate, production) and
how they ended (scored, error: the arm failed the record; a candidate error is then scored by
production), the percent this scorer routes, and its decisions; with labels, each arm's
labelled records and how many it got right (this scorer's partitions, read at scrape time)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from headrace.rollout.canary_steps import Labelled
from headrace.scorers.engine.metrics import ScorerMetrics

Totals = Callable[[], tuple[Labelled, Labelled]]  # (production, candidate)


class CanaryMetrics:
    def __init__(self, metrics: ScorerMetrics, labelled: Totals | None = None) -> None:
        r, self.stream = metrics.registry, metrics.stream
        if labelled is not None:
            r.register(_LabelledCollector(self.stream, labelled))
        self.records = Counter("headrace_scorer_canary_records",
                               "Records routed during a canary, by arm and outcome.",
                               ["stream", "arm", "outcome"], registry=r)
        self.percent = Gauge("headrace_scorer_canary_percent",
                             "Percent of the keys this scorer routes to a canary (0: none).",
                             ["stream"], registry=r).labels(stream=self.stream)
        self.decisions = Counter("headrace_scorer_canary_decisions",
                                 "Canary steps, promotions and rollbacks decided here.",
                                 ["stream", "verdict"], registry=r)

    def count(self, arm: str, records: int, errors: int) -> None:
        if records - errors:
            self.records.labels(stream=self.stream, arm=arm, outcome="scored").inc(
                records - errors)
        if errors:
            self.records.labels(stream=self.stream, arm=arm, outcome="error").inc(errors)


class _LabelledCollector(Collector):
    def __init__(self, stream: str, totals: Totals) -> None:
        self.stream, self.totals = stream, totals

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labelled = GaugeMetricFamily(
            "headrace_scorer_canary_labelled",
            "Canary records joined to their label, by arm (this scorer's partitions).",
            labels=["stream", "arm"])
        correct = GaugeMetricFamily(
            "headrace_scorer_canary_labelled_correct",
            "Of those, the records the arm's prediction got right.", labels=["stream", "arm"])
        for arm, t in zip(("production", "candidate"), self.totals(), strict=True):
            labelled.add_metric([self.stream, arm], t.labelled)
            correct.add_metric([self.stream, arm], t.correct)
        yield labelled
        yield correct
