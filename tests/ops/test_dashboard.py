"""The dashboard: its JSON API on real sources, strict parameters, and the page in Chromium."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.contracts import JobEvent, JobEventKind
from headrace.core.errors import RecordRef, ValidationFailed
from headrace.core.ports import free_port
from headrace.core.settings import Settings, load_settings
from headrace.ops.dashboard import Dashboard
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.store.dfs import jobs_dir
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import send_events, write_dead_letter
from headrace.streams.topics import JOB_EVENTS, TopicSpec, catalog, data_topic, dlq_topic
from tests.browser import chromium, needs_chromium
from tests.fixtures import eventually
from tests.ops.dashboard_data import HISTORY, KEPT_WHY, MATRIX, REFUSED_WHY, write_dfs
from tests.ops.http_json import get


@dataclass(frozen=True)
class Streams:
    configured: str
    topic_only: str  # a data.<stream> topic on the broker, not configured
    dfs_only: str  # a dead-letter ledger on the DFS, its topic gone
    scorer_only: str  # reported by a scorer's metrics only

    def all(self) -> set[str]:
        return {self.configured, self.topic_only, self.dfs_only, self.scorer_only}


@pytest.fixture
def streams(settings: Settings) -> Streams:
    tag = uuid.uuid4().hex[:8]
    return Streams(settings.streams[0], f"topic{tag}", f"ledger{tag}", f"scored{tag}")


@pytest.fixture
def scorer_metrics(streams: Streams) -> Iterator[str]:
    """A real Prometheus endpoint serving a scorer's own metrics (ScorerMetrics): 1000 rows
    that waited 4-6 s in the topic and took 10-30 ms to score."""
    from prometheus_client import start_http_server

    m = ScorerMetrics(stream=streams.scorer_only, model="iris")
    m.rows.inc(1000)
    m.lag.labels(stream=streams.scorer_only, topic=data_topic(streams.scorer_only),
                 partition="0").set(7)
    m.model_version.labels(model="iris").set(2)
    rng = np.random.default_rng(3)
    waiting, scoring = rng.uniform(4.0, 6.0, 1000), rng.uniform(0.010, 0.030, 1000)
    m.waiting.observe_many(waiting)
    m.scoring.observe_many(scoring)
    m.latency.observe_many(waiting + scoring)
    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=m.registry)
    yield f"http://127.0.0.1:{port}/metrics"
    server.shutdown()


@pytest.fixture
def dash(conn: KafkaConnection, settings: Settings, scorer_metrics: str,
         streams: Streams) -> Iterator[Dashboard]:
    ensure_topics(conn, catalog(settings))
    ensure_topics(conn, [TopicSpec(data_topic(streams.topic_only), 1, "test")])
    (settings.dfs_root / "ops" / "dlq" / streams.dfs_only).mkdir(parents=True)
    write_dfs(settings.dfs_root, "iris")
    send_events(conn, JOB_EVENTS, [
        JobEvent(job_id="job-1", kind=JobEventKind.STARTED, model_name="iris"),
        JobEvent(job_id="job-1", kind=JobEventKind.PROGRESS, model_name="iris", epoch=2,
                 metrics={"loss": 0.4, "epochs": 4}),
        JobEvent(job_id="job-1", kind=JobEventKind.LOG, model_name="iris",
                 message="epoch 2/4 loss=0.40"),
        JobEvent(job_id="job-1", kind=JobEventKind.SUCCEEDED, model_name="iris"),
    ], key_of=lambda e: e.job_id)
    dfs_job = jobs_dir(settings.dfs_root) / "job-dfs"
    dfs_job.mkdir(parents=True, exist_ok=True)
    (dfs_job / "status.json").write_text(json.dumps(
        {"job_id": "job-dfs", "model_name": "iris", "framework": "tensorflow",
         "state": "succeeded", "attempts": 2, "metrics": {"accuracy": 0.9}}))
    p = make_producer(conn)
    stream = settings.streams[0]
    for i in range(3):
        ref = RecordRef(data_topic(stream), 0, i, value=b"{bad")
        write_dead_letter(p, dlq_topic(stream), DeadLetter.from_error(
            ref, ValidationFailed("undecodable JSON record"), stage="decode"))
    p.flush(10)
    d = Dashboard(settings=settings, conn=conn, scorer_urls=[scorer_metrics])
    d.start()
    _wait(lambda: d.state.jobs.get("job-1", logs=0) is not None, "job events")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def bare_dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """One dashboard on an empty DFS with no broker, for the requests that need no data."""
    d = Dashboard(settings=load_settings(dfs_root=tmp_path_factory.mktemp("bare-dfs")),
                  conn=None)
    d.start()
    yield d
    d.stop()


def _wait(cond: Any, what: str, timeout_s: float = 20) -> None:
    eventually(cond, timeout_s=timeout_s, interval_s=0.1, what=what)


def test_api_serves_jobs_models_scorers_and_dead_letters(dash: Dashboard,
                                                         settings: Settings) -> None:
    status, jobs = get(dash.url + "api/jobs")
    job = next(j for j in jobs["jobs"] if j["job_id"] == "job-1")
    assert status == 200 and job["status"] == "succeeded" and job["progress"] == 1.0
    # A job known only from the DFS (its events expired): a finished one shows a full bar.
    on_dfs = next(j for j in jobs["jobs"] if j["job_id"] == "job-dfs")
    assert on_dfs["source"] == "dfs" and on_dfs["status"] == "succeeded"
    assert on_dfs["progress"] == 1.0 and on_dfs["attempt"] == 2
    assert on_dfs["metrics"] == {"accuracy": 0.9}
    status, detail = get(dash.url + "api/jobs/job-1?logs=10")
    assert any("epoch 2/4 loss=0.40" in line for line in detail["logs"])

    status, models = get(dash.url + "api/models")
    iris = next(m for m in models["models"] if m["name"] == "iris")
    assert iris["production"] == 2 and [v["version"] for v in iris["versions"]] == [1, 2, 3, 4]
    status, v2 = get(dash.url + "api/models/iris/2")
    assert v2["confusion_matrix"] == MATRIX and v2["production"]
    assert v2["classes"] == ["a", "b", "c"]

    _wait(lambda: get(dash.url + "api/scorers")[1]["scorers"][0].get("rows_total"), "a scrape")
    scorer = get(dash.url + "api/scorers")[1]["scorers"][0]
    assert scorer["rows_total"] == 1000 and scorer["lag"] == 7 and scorer["model"] == "iris:2"

    status, dlq = get(dash.url + f"api/dlq?stream={settings.streams[0]}&max=2")
    assert dlq["count"] == 3 and dlq["groups"][0]["error_class"] == "ValidationFailed"
    assert len(dlq["letters"]) == 2


def test_every_job_and_version_carries_the_gates_outcome_and_reasons(dash: Dashboard) -> None:
    jobs = {j["job_id"]: j for j in get(dash.url + "api/jobs")[1]["jobs"]}
    # events.jobs is the session's: other tests' jobs (a canary's audit) may be there too.
    outcome = {k: (j.get("outcome") or {}).get("result") for k, j in jobs.items()
               if k.startswith("job-")}
    assert outcome == {"job-1": "promoted", "job-kept": "kept", "job-refused": "refused",
                       "job-legacy": "refused", "job-unstored": "refused", "job-dfs": None}
    assert jobs["job-kept"]["outcome"]["reason"] == KEPT_WHY
    assert jobs["job-refused"]["outcome"] == {"result": "refused",
                                              "reason": "; ".join(REFUSED_WHY),
                                              "held_by": ["min", "class_recall"],
                                              "via": None, "line": "refused: "
                                              + "; ".join(REFUSED_WHY)}
    assert jobs["job-refused"]["training"] == {"epochs_run": 5, "best_epoch": 3,
                                               "stopped_because": "early_stopping",
                                               "epochs": 5}
    # A job's detail: from its events when the DFS has no word on it, else from the DFS.
    assert get(dash.url + "api/jobs/job-1?logs=0")[1]["outcome"]["result"] == "promoted"
    assert get(dash.url + "api/jobs/job-legacy?logs=0")[1]["outcome"]["held_by"] == ["baseline"]
    models = {m["name"]: m for m in get(dash.url + "api/models")[1]["models"]}
    got = [(v["version"], v["outcome"]["result"]) for v in models["iris"]["versions"]]
    assert got == [(1, "kept"), (2, "promoted"), (3, "refused"), (4, "refused")]
    assert models["iris"]["versions"][0]["outcome"]["reason"] == KEPT_WHY
    # Refused without a stored version: listed under its model, with the reason.
    [wine] = models["wine"]["versions"]
    assert wine["version"] is None and wine["job_id"] == "job-unstored"
    assert wine["outcome"]["reason"] == "accuracy 0.3000 < min 0.9000"


def test_training_curves_come_from_the_jobs_history_for_the_job_and_its_version(
        dash: Dashboard) -> None:
    status, detail = get(dash.url + "api/jobs/job-refused?logs=0")
    h = detail["history"]
    assert status == 200 and h["epochs"] == [1, 2, 3, 4, 5]
    assert h["series"]["val_loss"] == [e["val_loss"] for e in HISTORY["epochs"]]
    assert h["series"]["accuracy"] == [0.41, None, 0.74, 0.79, 0.83]  # a gap, not a zero
    assert (h["best_epoch"], h["stopped_because"]) == (3, "early_stopping")
    status, v3 = get(dash.url + "api/models/iris/3")
    assert v3["training"] == h and v3["outcome"]["result"] == "refused"
    assert v3["outcome"]["reason"] == "; ".join(REFUSED_WHY)
    status, v2 = get(dash.url + "api/models/iris/2")
    assert v2["training"] is None and v2["outcome"]["result"] == "promoted"


def test_every_stream_is_listed_wherever_it_was_seen(dash: Dashboard, streams: Streams) -> None:
    _wait(lambda: streams.scorer_only in get(dash.url + "api/overview")[1]["streams"],
          "the scorer's stream")
    _wait(lambda: streams.topic_only in get(dash.url + "api/overview")[1]["streams"],
          "the broker's topics")
    overview = get(dash.url + "api/overview")[1]
    seen = {s["name"]: s["seen_in"] for s in overview["stream_details"]}
    assert seen[streams.configured][:2] == ["configured", "topic"]
    assert seen[streams.topic_only] == ["topic"]
    assert seen[streams.dfs_only] == ["dfs"]
    assert seen[streams.scorer_only] == ["scorer"]
    assert overview["streams"] == sorted(seen)
    # Dead letters are counted in the background: 3 on the configured stream, and a stream
    # seen only on the DFS has no dead-letter topic (said, not an error page).
    _wait(lambda: {s["name"]: s["dead_letters"] for s in get(dash.url + "api/overview")[1][
        "stream_details"]}.get(streams.configured) == 3, "the background count")
    _wait(lambda: {s["name"]: s for s in get(dash.url + "api/overview")[1][
        "stream_details"]}[streams.dfs_only]["dead_letters_error"], "the ledger-only stream")
    details = {s["name"]: s for s in get(dash.url + "api/overview")[1]["stream_details"]}
    assert "has no dead-letter topic" in details[streams.dfs_only]["dead_letters_error"]


def test_scorer_latency_is_split_and_its_quantiles_interpolated(dash: Dashboard) -> None:
    _wait(lambda: get(dash.url + "api/scorers")[1]["scorers"][0].get("waiting"), "a scrape")
    s = get(dash.url + "api/scorers")[1]["scorers"][0]
    # Uniform 4-6 s waiting and 10-30 ms scoring: interpolation finds the middles, and the
    # 99th percentile of scoring within a few percent (2.5 ms buckets there); waiting's p99
    # lies in the 5-7.5 s bucket, where a bound would have said 7.5 s.
    assert 4.8 <= s["waiting"]["p50_s"] <= 5.2 and 5.0 < s["waiting"]["p99_s"] < 7.5
    assert 0.018 <= s["scoring"]["p50_s"] <= 0.022
    assert 0.0285 <= s["scoring"]["p99_s"] <= 0.0300
    assert s["latency"]["count"] == s["waiting"]["count"] == s["scoring"]["count"] == 1000
    assert s["latency"]["mean_s"] == pytest.approx(
        s["waiting"]["mean_s"] + s["scoring"]["mean_s"], rel=1e-9)
    assert s["stream"] and s["latency"]["basis"] == "since start"


@pytest.mark.parametrize(("path", "code", "message"), [
    ("api/jobs?limit=abc", 400, "must be an integer"),
    ("api/jobs?limit=0", 400, "between 1 and 500"),
    ("api/jobs?limit=1&limit=2", 400, "more than once"),
    ("api/jobs?status=exploded", 400, "must be one of"),
    ("api/jobs?evil=1", 400, "unknown parameter 'evil'"),
    ("api/jobs/..%2F..%2Fetc", 400, "invalid job id"),
    ("api/jobs/no-such-job", 404, "no job no-such-job"),
    ("api/models/iris/abc", 400, "must be a positive integer"),
    ("api/models/iris/99", 404, "has no version 99"),
    ("api/models/..%2Fsecrets/1", 400, "invalid model name"),
    ("api/dlq", 400, "'stream' is required"),
    ("api/dlq?stream=Bad%21", 400, "invalid stream name"),
    ("api/nothing", 404, "no such endpoint"),
    ("static/..%2F..%2Fpyproject.toml", 404, "not found"),
    ("static/../../pyproject.toml", 404, "not found"),
    ("static/__init__.py", 404, "not found"),
])
def test_bad_requests_get_a_one_line_error_never_a_traceback(bare_dash: Dashboard, path: str,
                                                             code: int, message: str) -> None:
    status, body = get(bare_dash.url + path)
    assert status == code and message in body["error"]
    assert "Traceback" not in body["error"] and "\n" not in body["error"]


def test_static_files_and_index_are_served(bare_dash: Dashboard) -> None:
    with urllib.request.urlopen(bare_dash.url, timeout=10) as r:
        assert b"<canvas id=\"heatmap\"" in r.read()
    with urllib.request.urlopen(bare_dash.url + "static/app.js", timeout=10) as r:
        assert "javascript" in r.headers["Content-Type"]




DASH = "\N{EN DASH}"  # the page's "none" (an unknown outcome, an unstored version)
SHOT_DIR_ENV = "HEADRACE_DASHBOARD_SHOT_DIR"  # set: the screenshot is kept there to look at


@pytest.mark.slow
@needs_chromium
def test_page_shows_gate_badges_every_stream_curves_and_heatmap_in_chromium_at_1280px(
    dash: Dashboard, settings: Settings, streams: Streams, tmp_path: Path,
) -> None:
    import os

    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with chromium(window=(1280, 1000)) as driver:

        def badges(where: str, key: str) -> dict[str, list[str]]:
            return driver.execute_script(
                f"const out = {{}}; for (const tr of document.querySelectorAll("
                f"'{where} tbody tr')) {{ const k = {key}; out[k] = "
                "[...tr.querySelectorAll('.badge')].map((b) => b.textContent); } return out;")

        driver.get(dash.url)
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: "iris:2" in d.find_element(By.ID, "model-title").text)
        wait.until(lambda d: "job-refused" in d.find_element(By.ID, "jobs").text)
        wait.until(lambda d: "ValidationFailed" in d.find_element(By.ID, "dlq").text)
        wait.until(lambda d: "1000" in d.find_element(By.ID, "scorers").text)
        wait.until(lambda d: streams.all() <= set(d.execute_script(
            "return [...document.querySelectorAll('#streams tr[data-stream]')]"
            ".map((tr) => tr.dataset.stream)")))
        # The gate's outcome per job: a kept or refused job is not a green "succeeded".
        jobs = badges("#jobs", "tr.dataset.job")
        assert jobs["job-1"] == ["succeeded", "promoted"]
        assert jobs["job-kept"] == ["succeeded", "kept"]
        assert jobs["job-refused"] == jobs["job-legacy"] == ["succeeded", "refused"]
        assert jobs["job-dfs"] == ["succeeded", DASH]
        jobs_text = driver.find_element(By.ID, "jobs").text
        assert REFUSED_WHY[0] in jobs_text and "production is at the newer iris:2" in jobs_text
        # ... and per version, the production one marked as such.
        versions = badges("#models", "tr.cells[0].textContent + ':' + tr.cells[1].textContent")
        assert versions == {"iris:1": ["kept"], "iris:2": ["promoted", "production"],
                            "iris:3": ["refused"], "iris:4": ["refused"],
                            f"wine:{DASH}": ["refused"]}
        # Every stream, in the table and in the header.
        listed = driver.execute_script(
            "return [...document.querySelectorAll('#streams tr[data-stream]')]"
            ".map((tr) => tr.dataset.stream)")
        overview = get(dash.url + "api/overview")[1]
        assert listed == overview["streams"]
        for name in streams.all():
            assert name in driver.find_element(By.ID, "overview").text
        # Latency split: waiting ~5 s, scoring ~20 ms, both shown.
        scorers = driver.find_element(By.ID, "scorers").text
        assert " s" in scorers and " ms" in scorers and "waiting in topic" in scorers
        # Nothing cut behind a horizontal scrollbar at 1280 px.
        overflow = driver.execute_script(
            "return [...document.querySelectorAll('section')]"
            ".filter((s) => s.scrollWidth > s.clientWidth + 1).map((s) => s.id)")
        assert overflow == [], f"sections wider than the window: {overflow}"
        assert driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth")
        # Curves of a refused job: loss and accuracy, train and validation lines.
        driver.find_element(By.CSS_SELECTOR, '#jobs tr[data-job="job-refused"]').click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#job-curves svg")) == 2)
        charts = driver.find_elements(By.CSS_SELECTOR, "#job-curves svg")
        assert [c.get_attribute("data-metric") for c in charts] == ["loss", "accuracy"]
        for c in charts:
            assert len(c.find_elements(By.CSS_SELECTOR, "polyline")) == 2
        assert "best epoch 3" in driver.find_element(By.ID, "job-curves").text
        assert REFUSED_WHY[1] in driver.find_element(By.ID, "job-outcome").text
        canvas = driver.find_element(By.ID, "heatmap")
        driver.execute_script("arguments[0].scrollIntoView()", canvas)
        time.sleep(0.3)
        shot = tmp_path / "dashboard.png"
        driver.save_screenshot(str(shot))
        rect = driver.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return [r.left, r.top, r.width, r.height, window.devicePixelRatio];", canvas)
        if os.environ.get(SHOT_DIR_ENV):
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1280, int(height) + 140)
            time.sleep(0.5)
            driver.save_screenshot(str(Path(os.environ[SHOT_DIR_ENV]) / "dashboard-test.png"))
        # A fresh DFS and no broker: each empty panel says what to run next.
        empty_dfs = tmp_path / "empty-dfs"
        empty_dfs.mkdir()
        empty = Dashboard(settings=settings.with_overrides(dfs_root=empty_dfs), conn=None)
        empty.start()
        try:
            driver.get(empty.url)
            wait.until(lambda d: d.execute_script("return document.body.dataset.loaded"))
            wait.until(lambda d: "no jobs yet" in d.find_element(By.ID, "jobs").text)
            assert "headrace train NAME" in driver.find_element(By.ID, "jobs").text
            assert "no models yet" in driver.find_element(By.ID, "models").text
            scorers = driver.find_element(By.ID, "scorers").text
            assert "no scorers registered" in scorers and "headrace up" in scorers
            assert "no Kafka given" in driver.find_element(By.ID, "streams").text
        finally:
            empty.stop()
    left, top, width, height, dpr = rect
    img = Image.open(shot).convert("RGB")
    box = img.crop((int(left * dpr), int(top * dpr), int((left + width) * dpr),
                    int((top + height) * dpr)))
    flat = getattr(box, "get_flattened_data", None) or box.getdata
    pixels = list(flat())
    blue = sum(1 for r, g, b in pixels if b > 150 and r < 120 and g < 160)  # dark heatmap cells
    tinted = sum(1 for r, g, b in pixels if (r, g, b) != (255, 255, 255))
    assert len(pixels) > 50_000
    # Diagonal cells (40, 35, 50 of max 50) are deep blue: at least ~3 cells of ~75x75 px.
    assert blue > 12_000, f"heatmap not rendered: {blue} blue pixels of {len(pixels)}"
    assert tinted > 0.3 * len(pixels)
