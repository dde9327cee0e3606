"""Scorer latency as the dashboard shows it: interpolated quantiles, recent windows, and a real
scorer's split into waiting in the topic and scoring."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from headrace.core.quantiles import bucket_difference, bucket_quantile
from headrace.core.settings import Settings
from headrace.ops.dashboard.scrape import Histogram, parse_metrics, scrape, summarise
from headrace.scorers.engine.metrics import LATENCY_BUCKETS, VectorHistogram
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.codecs import encode_json
from headrace.streams.topics import catalog, data_topic, predictions_topic
from tests.fixtures import eventually
from tests.scorers.conftest import publish_tf, read_topic, rows, scorer_thread, wait_ready

INF = math.inf


def test_quantiles_are_interpolated_inside_the_bucket_not_its_upper_bound() -> None:
    # 10 observations: 4 in (0, 10 ms], 6 in (10, 20 ms]
    b = [(0.01, 4.0), (0.02, 10.0), (INF, 10.0)]
    assert bucket_quantile(b, 0.5) == pytest.approx(0.01 + 0.01 * (5 - 4) / 6)
    assert bucket_quantile(b, 0.99) == pytest.approx(0.01 + 0.01 * (9.9 - 4) / 6)
    assert bucket_quantile(b, 0.2) == pytest.approx(0.005)
    assert bucket_quantile([(0.01, 0.0), (INF, 0.0)], 0.5) is None
    assert bucket_quantile([(0.01, 1.0), (INF, 3.0)], 0.5) == INF  # past the last bound
    # Two series of one histogram (e.g. two streams) are added bound by bound.
    assert bucket_quantile([(0.01, 2.0), (INF, 2.0), (0.01, 2.0), (INF, 2.0)], 1.0) == 0.01
    with pytest.raises(ValueError):
        bucket_quantile(b, 1.5)


def test_the_scorers_buckets_resolve_a_p99_between_10_and_100_ms_within_ten_percent() -> None:
    rng = np.random.default_rng(7)
    for target in (0.011, 0.023, 0.047, 0.068, 0.093):
        # exponential times whose p99 is the target (p99 = scale * ln 100)
        values = rng.exponential(target / math.log(100), 20_000)
        h = VectorHistogram("x", "x", LATENCY_BUCKETS, {})
        h.observe_many(values)
        true = float(np.quantile(values, 0.99))
        got = h.quantile(0.99)
        assert abs(got - true) / true < 0.10, (true, got)


def test_recent_quantiles_come_from_the_difference_of_two_scrapes() -> None:
    start = Histogram([(0.01, 0.0), (60.0, 100.0), (INF, 100.0)], 100.0, 5000.0)  # a backlog
    later = Histogram([(0.01, 50.0), (60.0, 150.0), (INF, 150.0)], 150.0, 5000.2)
    recent = summarise(later, start, window_s=60)
    assert recent["basis"] == "last 60 s" and recent["count"] == 50
    assert recent["p99_s"] <= 0.01 and recent["mean_s"] == pytest.approx(0.004)
    whole = summarise(later, None, window_s=60)
    assert whole["basis"] == "since start" and whole["p99_s"] > 50
    # A restarted scorer (counts went down): what it holds now, not negative counts.
    assert bucket_difference([(0.01, 1.0), (INF, 1.0)], [(0.01, 5.0), (INF, 9.0)]) == \
        [(0.01, 1.0), (INF, 1.0)]
    # Past the last bound: flagged, and the JSON stays strict (no Infinity).
    over = summarise(Histogram([(300.0, 1.0), (INF, 10.0)], 10.0, 9000.0), None, window_s=60)
    assert over["above_last_bound"] == ["p50_s", "p99_s"] and over["p99_s"] == 300.0
    json.dumps(over, allow_nan=False)


def test_a_real_scorer_splits_latency_into_time_in_the_topic_and_scoring(
        settings: Settings, conn: KafkaConnection, dfs: Path) -> None:
    """Records created 3 s before they are sent wait >= 3 s; scoring them takes far less;
    the two add up to the end-to-end latency, record by record."""
    ensure_topics(conn, catalog(settings))
    stream = settings.streams[0]
    data = data_topic(stream)
    publish_tf(dfs, stream)
    with scorer_thread(settings, conn) as scorer:
        wait_ready(scorer)
        p = make_producer(conn)
        created = int(time.time() * 1000) - 3000
        for i, r in enumerate(rows(300)):
            p.produce(data, encode_json(r), f"k{i}", timestamp=created,
                      headers=[(hdr.CONTENT_TYPE, hdr.JSON.encode())])
        assert p.flush(15) == 0
        read_topic(conn, predictions_topic(stream), expect=300, settle_s=0)
        url = f"http://127.0.0.1:{scorer.http_port}/metrics"
        eventually(lambda: parse_metrics_count(url) >= 300, timeout_s=30,
                   what="300 rows in the latency histogram")
        sample = scrape(url)
    lat, wait, score = (sample.histograms[k] for k in ("latency", "waiting", "scoring"))
    assert lat.count == wait.count == score.count == 300
    assert sample.streams == {stream}
    assert lat.sum == pytest.approx(wait.sum + score.sum, rel=1e-6)
    w, s = summarise(wait, None, window_s=60), summarise(score, None, window_s=60)
    assert w["p50_s"] >= 3.0 and w["mean_s"] >= 3.0
    assert s["p99_s"] < 2.0 and s["mean_s"] < w["mean_s"] / 2


def parse_metrics_count(url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        h = parse_metrics(r.read().decode()).histograms.get("scoring")
    return h.count if h else 0.0
