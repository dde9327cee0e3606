"""The dashboard's drift panel: ``/api/drift`` shows, per stream, the latest state of each
feature from the compacted ``events.drift`` (DriftDetected records on the real broker, as
scorers publish them), with since when it is in that state; the page renders it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from headrace.contracts import DriftDetected
from headrace.core.settings import Settings, load_settings
from headrace.ops.dashboard import Dashboard
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics
from tests.browser import chromium, needs_chromium, panel_text
from tests.fixtures import eventually
from tests.ops.http_json import get

T0 = datetime(2026, 11, 24, 20, 0, tzinfo=UTC)


def drift(stream: str, feature: str, drifting: bool, minute: int, *, value: float = 0.3,
          version: int = 2, consecutive: int = 1) -> DriftDetected:
    return DriftDetected(
        stream=stream, model_name="iris", model_version=version, feature=feature,
        statistic="psi", value=value, threshold=0.12, drifting=drifting, window=minute,
        consecutive=consecutive if drifting else 0, rows=500, scorer="scorer-0",
        ts=T0 + timedelta(minutes=minute))


@pytest.fixture
def drift_settings(broker: str, dfs: Path) -> Settings:
    return load_settings(bootstrap=broker, dfs_root=dfs,
                         topic_prefix="t" + uuid.uuid4().hex[:10])


@pytest.fixture
def dash(conn: KafkaConnection, drift_settings: Settings) -> Iterator[Dashboard]:
    topics = ControlTopics.of(drift_settings)
    ensure_topics(conn, topics.specs())
    send_events(conn, topics.drift, [
        drift("clicks", "f0", False, 0, value=0.01),
        drift("clicks", "f0", True, 1, consecutive=1),
        drift("clicks", "f0", True, 2, value=0.45, consecutive=2),  # the same run: since 1
        drift("clicks", "f1", True, 1),
        drift("clicks", "f1", False, 3, value=0.02),  # back: since 3
        drift("clicks", "image:brightness", False, 2, value=0.05),
        drift("views", "f0", True, 4, version=7, value=0.9),
    ], key_of=lambda e: e.key().decode())
    p = make_producer(conn)
    p.produce(topics.drift, key=b"bad", value=b"{not json")
    p.produce(topics.drift, key=drift("views", "gone", True, 0).key(), value=b'{"x":1}')
    p.flush(10)
    d = Dashboard(settings=drift_settings, conn=conn)
    d.start()
    eventually(lambda: d.state.drift.records == 7, timeout_s=30, interval_s=0.2,
               what="the drift records read")
    yield d
    d.stop()


def test_api_shows_the_latest_state_of_each_feature_per_stream(dash: Dashboard) -> None:
    status, body = get(dash.url + "api/drift")
    assert status == 200 and body["bad_records"] == 2
    clicks, views = body["streams"]
    assert (clicks["stream"], clicks["drifting"], views["stream"], views["drifting"]) == (
        "clicks", 1, "views", 1)
    rows = [(f["feature"], f["model"], f["version"], f["statistic"], f["value"], f["threshold"],
             f["drifting"], f["since"], f["consecutive"]) for f in clicks["features"]]
    at = [(T0 + timedelta(minutes=m)).isoformat() for m in range(4)]
    assert rows == [  # drifting first, then by feature
        ("f0", "iris", 2, "psi", 0.45, 0.12, True, at[1], 2),
        ("f1", "iris", 2, "psi", 0.02, 0.12, False, at[3], 0),
        ("image:brightness", "iris", 2, "psi", 0.05, 0.12, False, at[2], 0),
    ]
    assert [(f["feature"], f["version"], f["value"]) for f in views["features"]] == [
        ("f0", 7, 0.9)]
    # One stream on its own; a bad stream name is a one-line 400.
    status, only = get(dash.url + "api/drift?stream=views")
    assert status == 200 and [s["stream"] for s in only["streams"]] == ["views"]
    status, err = get(dash.url + "api/drift?stream=..%2Fetc")
    assert status == 400 and len(err["error"].splitlines()) == 1


def test_without_kafka_the_drift_panel_says_so(tmp_path: Path) -> None:
    d = Dashboard(settings=load_settings(dfs_root=tmp_path), conn=None)
    d.start()
    try:
        status, body = get(d.url + "api/drift")
        assert status == 200 and body["streams"] == [] and "no Kafka" in body["error"]
    finally:
        d.stop()


@needs_chromium
def test_page_renders_the_drift_panel_in_chromium(dash: Dashboard) -> None:
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        driver.get(dash.url)
        text = panel_text(driver, "drift", "image:brightness")
        f0 = driver.find_element(By.CSS_SELECTOR, 'table[data-stream="clicks"] '
                                                  'tr[data-feature="f0"]').text
    assert "clicks: 1 of 3 drifting" in text and "views: 1 of 1 drifting" in text
    assert "iris:2" in f0 and "0.4500" in f0 and "0.1200" in f0 and "drifting" in f0
