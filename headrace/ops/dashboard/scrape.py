"""Scorers as the dashboard sees them: each scorer's Prometheus text from its /metrics.

Latency is shown three ways, from three histograms of the scorer (scorers/engine/metrics.py):
end to end (record CreateTime to prediction acknowledged), waiting (CreateTime to the scorer
receiving it: time in the topic) and scoring (receipt to acknowledgement). Quantiles are
interpolated inside their bucket (core.quantiles) over the last minute of scrapes when records
came in then, else over everything since the scorer started (``basis`` says which), so a
backlog the scorer worked through at start does not hide today's latency for ever.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from headrace.core.quantiles import bucket_difference, bucket_quantile

# Histogram family -> the key it is shown under.
HISTOGRAMS = {"headrace_scorer_latency_seconds": "latency",
              "headrace_scorer_wait_seconds": "waiting",
              "headrace_scorer_scoring_seconds": "scoring"}
WINDOW_S = 60.0  # quantiles over this much of the recent past, when it saw records
RATE_WINDOW_S = 10.0


@dataclass
class Histogram:
    buckets: list[tuple[float, float]] = field(default_factory=list)  # (le, cumulative)
    count: float = 0.0
    sum: float = 0.0


@dataclass
class ScorerSample:
    at: float
    rows: float | None = None
    predictions: float | None = None
    dead_letters: float | None = None
    lag: float | None = None
    model: str | None = None
    ready: float | None = None
    streams: set[str] = field(default_factory=set)
    histograms: dict[str, Histogram] = field(default_factory=dict)

    @property
    def latency_p50(self) -> float | None:
        h = self.histograms.get("latency")
        return None if h is None else bucket_quantile(h.buckets, 0.5)

    @property
    def latency_p99(self) -> float | None:
        h = self.histograms.get("latency")
        return None if h is None else bucket_quantile(h.buckets, 0.99)


def scrape(url: str, *, timeout_s: float = 2.0) -> ScorerSample:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        text = resp.read(4 * 1024 * 1024).decode("utf-8", "replace")
    return parse_metrics(text)


def parse_metrics(text: str) -> ScorerSample:
    from prometheus_client.parser import text_string_to_metric_families

    out = ScorerSample(at=time.monotonic())
    for fam in text_string_to_metric_families(text):
        name = fam.name
        if name.endswith("_created"):
            # The classic text format adds a `<counter>_created` gauge (a Unix time) per
            # counter; `model_swaps_created{model=...}` is not the model's version.
            continue
        for s in fam.samples:
            sname, labels, value = s.name, s.labels, float(s.value)
            if "stream" in labels and name.startswith("headrace_scorer"):
                out.streams.add(labels["stream"])
            if fam.type == "counter" and sname.endswith("_total"):
                if "dead" in name or "dlq" in name:
                    out.dead_letters = (out.dead_letters or 0.0) + value
                elif "prediction" in name:
                    out.predictions = (out.predictions or 0.0) + value
                elif "rows" in name or "records" in name:
                    out.rows = (out.rows or 0.0) + value
            elif fam.type == "gauge":
                if "lag" in name:
                    out.lag = (out.lag or 0.0) + value
                elif "ready" in name:
                    out.ready = value
                elif name.endswith("model_version"):
                    # The gauge's value is the manifest version; the label names the model.
                    who = labels.get("model", labels.get("name"))
                    out.model = f"{who}:{int(value)}" if who else str(int(value))
            elif fam.type == "histogram" and name in HISTOGRAMS:
                h = out.histograms.setdefault(HISTOGRAMS[name], Histogram())
                if sname.endswith("_bucket"):
                    le = labels.get("le", "+Inf")
                    h.buckets.append((math.inf if le == "+Inf" else float(le), value))
                elif sname.endswith("_count"):
                    h.count += value
                elif sname.endswith("_sum"):
                    h.sum += value
    return out


def summarise(new: Histogram, old: Histogram | None, *, window_s: float) -> dict[str, Any]:
    """p50/p99/mean of the observations since ``old`` (if any came), else of all of them."""
    buckets, count, total = new.buckets, new.count, new.sum
    basis = "since start"
    if old is not None and new.count > old.count >= 0:
        buckets = bucket_difference(new.buckets, old.buckets)
        count, total = new.count - old.count, new.sum - old.sum
        basis = f"last {window_s:.0f} s"
    last_bound = max((le for le, _ in buckets if math.isfinite(le)), default=None)
    out: dict[str, Any] = {"basis": basis, "count": count,
                           "mean_s": total / count if count > 0 else None,
                           "last_bound_s": last_bound, "above_last_bound": []}
    for key, q in (("p50_s", 0.5), ("p99_s", 0.99)):
        v = bucket_quantile(buckets, q)
        if v is not None and math.isinf(v):  # JSON has no infinity: flag it instead
            out["above_last_bound"].append(key)
            v = last_bound
        out[key] = v
    return out


class ScorerBoard:
    """Recent scrapes per scorer URL: counters into rates, histograms into recent quantiles."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = list(urls)
        self.samples: dict[str, deque[ScorerSample]] = {}
        self.errors: dict[str, str] = {}
        self.lock = threading.Lock()

    def add(self, url: str) -> None:
        with self.lock:
            if url not in self.urls:
                self.urls.append(url)

    def refresh(self) -> None:
        for url in list(self.urls):
            try:
                sample = scrape(url)
            except Exception as exc:
                with self.lock:
                    self.errors[url] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            with self.lock:
                kept = self.samples.setdefault(url, deque(maxlen=200))
                kept.append(sample)
                while len(kept) > 2 and sample.at - kept[0].at > WINDOW_S:
                    kept.popleft()
                self.errors.pop(url, None)

    def streams(self) -> set[str]:
        with self.lock:
            return {s for kept in self.samples.values() if kept for s in kept[-1].streams}

    def view(self) -> list[dict[str, Any]]:
        out = []
        with self.lock:
            for url in self.urls:
                row: dict[str, Any] = {"url": url, "error": self.errors.get(url)}
                kept = list(self.samples.get(url, ()))
                if kept:
                    row.update(_row(kept))
                out.append(row)
        return out


def _row(kept: list[ScorerSample]) -> dict[str, Any]:
    s, oldest = kept[-1], kept[0] if len(kept) > 1 else None
    row: dict[str, Any] = {
        "stream": ", ".join(sorted(s.streams)) or None, "rows_total": s.rows,
        "predictions_total": s.predictions, "dead_letters_total": s.dead_letters, "lag": s.lag,
        "model": s.model, "ready": s.ready, "rows_per_s": None}
    recent = [k for k in kept if s.at - k.at <= RATE_WINDOW_S and k is not s]
    if recent and s.rows is not None and recent[0].rows is not None and s.at > recent[0].at:
        row["rows_per_s"] = max(0.0, (s.rows - recent[0].rows) / (s.at - recent[0].at))
    window = s.at - oldest.at if oldest else 0.0
    for key, h in s.histograms.items():
        old = oldest.histograms.get(key) if oldest else None
        row[key] = summarise(h, old, window_s=max(window, 1.0))
    lat = row.get("latency") or {}
    # Flat fields kept for scripts that read them (end-to-end latency).
    row["latency_p50_s"], row["latency_p99_s"] = lat.get("p50_s"), lat.get("p99_s")
    return row
