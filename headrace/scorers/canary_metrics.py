"""The canary's counts on the scorer's /metrics: records per arm (candidate, production) and
how they ended (scored, error: the arm failed the record; a candidate error is then scored by
production), the percent this scorer routes, and its decisions."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from headrace.scorers.metrics import ScorerMetrics


class CanaryMetrics:
    def __init__(self, metrics: ScorerMetrics) -> None:
        r, self.stream = metrics.registry, metrics.stream
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
