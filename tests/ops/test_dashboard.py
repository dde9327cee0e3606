"""The dashboard: its JSON API on real sources, strict parameters, and the page in Chromium."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import Framework, JobEvent, JobEventKind, Task
from headrace.core.errors import RecordRef, ValidationFailed
from headrace.core.settings import Settings
from headrace.ops.dashboard import Dashboard
from headrace.store import versions
from headrace.store.dfs import jobs_dir
from headrace.store.manifest import Manifest
from headrace.streams.clients import KafkaConnection, ensure_topics, make_producer
from headrace.streams.dlq import DeadLetter
from headrace.streams.producing import send_events, write_dead_letter
from headrace.streams.topics import JOB_EVENTS, catalog, data_topic, dlq_topic
from tests.fixtures import eventually

MATRIX = [[40, 2, 1], [3, 35, 4], [0, 5, 50]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _publish(root: Path, name: str) -> None:
    def files(d: Path) -> None:
        (d / "weights.bin").write_bytes(b"\0" * 16)

    for acc in (0.81, 0.88):
        mv = versions.publish(root, Manifest(
            name=name, framework=Framework.TENSORFLOW, task=Task.CLASSIFIER,
            features=("f0", "f1"), label="label", classes=("a", "b", "c"),
            metrics={"accuracy": acc}, confusion_matrix=MATRIX), files)
    versions.set_alias(root, name, mv.version)


@pytest.fixture
def scorer_metrics() -> Iterator[str]:
    """A real Prometheus endpoint with the metric shapes a scorer exposes."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

    reg = CollectorRegistry()
    rows = Counter("headrace_scorer_rows", "rows scored", registry=reg)
    Gauge("headrace_scorer_lag", "records behind", ["partition"], registry=reg).labels("0").set(7)
    lat = Histogram("headrace_scorer_latency_seconds", "end-to-end", registry=reg)
    rows.inc(1000)
    for v in (0.004, 0.006, 0.02):
        lat.observe(v)
    port = _free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    yield f"http://127.0.0.1:{port}/metrics"
    server.shutdown()


@pytest.fixture
def dash(conn: KafkaConnection, settings: Settings, scorer_metrics: str) -> Iterator[Dashboard]:
    ensure_topics(conn, catalog(settings))
    _publish(settings.dfs_root, "iris")
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


def _wait(cond: Any, what: str, timeout_s: float = 20) -> None:
    eventually(cond, timeout_s=timeout_s, interval_s=0.1, what=what)


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


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
    assert iris["production"] == 2 and [v["version"] for v in iris["versions"]] == [1, 2]
    status, v2 = get(dash.url + "api/models/iris/2")
    assert v2["confusion_matrix"] == MATRIX and v2["production"]
    assert v2["classes"] == ["a", "b", "c"]

    _wait(lambda: get(dash.url + "api/scorers")[1]["scorers"][0].get("rows_total"), "a scrape")
    scorer = get(dash.url + "api/scorers")[1]["scorers"][0]
    assert scorer["rows_total"] == 1000 and scorer["lag"] == 7
    assert 0.0 < scorer["latency_p50_s"] <= 0.01

    status, dlq = get(dash.url + f"api/dlq?stream={settings.streams[0]}&max=2")
    assert dlq["count"] == 3 and dlq["groups"][0]["error_class"] == "ValidationFailed"
    assert len(dlq["letters"]) == 2


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
def test_bad_requests_get_a_one_line_error_never_a_traceback(dash: Dashboard, path: str,
                                                             code: int, message: str) -> None:
    status, body = get(dash.url + path)
    assert status == code and message in body["error"]
    assert "Traceback" not in body["error"] and "\n" not in body["error"]


def test_static_files_and_index_are_served(dash: Dashboard) -> None:
    with urllib.request.urlopen(dash.url, timeout=10) as r:
        assert b"<canvas id=\"heatmap\"" in r.read()
    with urllib.request.urlopen(dash.url + "static/app.js", timeout=10) as r:
        assert "javascript" in r.headers["Content-Type"]


CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.mark.slow
@pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(DRIVER).exists()),
                    reason="needs Debian's chromium and chromium-driver "
                           "(apt-get install -y chromium chromium-driver)")
def test_page_renders_jobs_models_heatmap_and_dead_letters_in_chromium(
    dash: Dashboard, settings: Settings, tmp_path: Path,
) -> None:
    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 "--force-device-scale-factor=1", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        driver.get(dash.url)
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: "iris:2" in d.find_element(By.ID, "model-title").text)
        wait.until(lambda d: "job-1" in d.find_element(By.ID, "jobs").text)
        wait.until(lambda d: "ValidationFailed" in d.find_element(By.ID, "dlq").text)
        wait.until(lambda d: "1000" in d.find_element(By.ID, "scorers").text)
        assert "production" in driver.find_element(By.ID, "models").text
        assert "succeeded" in driver.find_element(By.ID, "jobs").text
        canvas = driver.find_element(By.ID, "heatmap")
        driver.execute_script("arguments[0].scrollIntoView()", canvas)
        time.sleep(0.3)
        shot = tmp_path / "dashboard.png"
        driver.save_screenshot(str(shot))
        rect = driver.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return [r.left, r.top, r.width, r.height, window.devicePixelRatio];", canvas)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    left, top, width, height, dpr = rect
    img = Image.open(shot).convert("RGB")
    box = img.crop((int(left * dpr), int(top * dpr), int((left + width) * dpr),
                    int((top + height) * dpr)))
    flat = getattr(box, "get_flattened_data", None) or box.getdata
    pixels = list(flat())
    blue = sum(1 for r, g, b in pixels if b > 150 and r < 120 and g < 160)  # dark heatmap cells
    tinted = sum(1 for r, g, b in pixels if (r, g, b) != (255, 255, 255))
    assert len(pixels) > 50_000
    # Diagonal cells (40, 35, 50 of max 50) are deep blue: at least ~3 cells of ~85x85 px.
    assert blue > 15_000, f"heatmap not rendered: {blue} blue pixels of {len(pixels)}"
    assert tinted > 0.3 * len(pixels)
