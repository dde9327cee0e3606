"""Make the README's images with the project itself: ``python docs/images/make_images.py``.

1. ``headrace demo`` on a DFS kept here (its own embedded broker): two model versions, each with
   the confusion matrix the trainer renders -> ``confusion_matrix.png`` (the production one).
2. The local stack on that DFS (a fresh embedded broker, control plane, a scorer for ``demo``),
   one more job under a gate it cannot pass (so a refused version shows with the gate's
   reasons), records streamed (a few of them bad, for the dead-letter panel), the dashboard
   served, and a screenshot of a 1280-px window taken with Debian's headless chromium ->
   ``dashboard.png``.

Needs ``apt-get install chromium chromium-driver`` and selenium (in the ``dev`` extra).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from headrace.contracts.gates import GATES_FILE
from headrace.core.settings import load_settings
from headrace.ops.dashboard import Dashboard
from headrace.ops.demo import run_demo, sample_rows
from headrace.ops.stack import Stack, wait_until
from headrace.store import versions
from headrace.streams.clients import KafkaConnection, make_producer
from headrace.streams.sending import send_table
from headrace.streams.topics import data_topic
from headrace.trainers import api
from headrace.trainers.datasets import make_demo

OUT = Path(__file__).resolve().parent
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="headrace-images-"))
    try:
        settings = load_settings(dfs_root=tmp / "dfs", streams=["demo", "digits"])
        console = Console()
        if run_demo(settings=settings, records=400, epochs=3, say=console.print,
                    keep_dfs=True) != 0:
            return 1
        prod = versions.resolve(settings.dfs_root, "demo")
        shutil.copy(prod.path / "confusion_matrix.png", OUT / "confusion_matrix.png")
        console.print(f"wrote {OUT / 'confusion_matrix.png'} (demo:{prod.version})")
        stack = Stack(settings, log_dir=tmp / "logs", scorers=["demo"])
        try:
            stack.start()
            assert stack.conn is not None
            _refused_job(stack.conn, settings.dfs_root, console)
            table = make_demo(out=tmp / "rows.parquet", rows=500, seed=7)
            import pyarrow.parquet as pq

            rows = sample_rows(pq.read_table(table), list(prod.manifest.features), 3000)
            scorer = next(c for c in stack.components if c.metrics_url)
            dash = Dashboard(settings=settings, conn=stack.conn,
                             scorer_urls=[scorer.metrics_url or ""])
            url = dash.start()
            wait_until(lambda: "1" in _get(scorer.metrics_url or "", "headrace_scorer_ready"),
                       timeout_s=120, what="the scorer to be ready", stack=stack)
            for i in range(6):  # a stream over a few seconds, so rows/s shows
                send_table(stack.conn, data_topic("demo"), rows.slice(i * 500, 500))
                time.sleep(1.0)
            p = make_producer(stack.conn)
            for bad in (b'{"f0": "oops"}', b"\xff\xfe", b'{"f0": 1.0}'):
                p.produce(data_topic("demo"), bad)
            p.flush(10)
            time.sleep(6)  # two dashboard refreshes, so the scorer panel has a rate
            _screenshot(url, OUT / "dashboard.png")
            console.print(f"wrote {OUT / 'dashboard.png'}")
            dash.stop()
        finally:
            stack.stop()
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refused_job(conn: KafkaConnection, root: Path, console: Console) -> None:
    """Train ``demo-strict`` under a gate no model passes: a version the gate refuses."""
    gates = root / GATES_FILE
    gates.parent.mkdir(parents=True, exist_ok=True)
    gates.write_text("models:\n  demo-strict:\n    min: {accuracy: 0.999}\n")
    request = api.build_request(model_name="demo-strict", framework="tensorflow",
                                dataset_uri="datasets/demo.parquet", epochs=2)
    job_id = api.request_training(conn=conn, request=request)
    final = api.wait_for_job(conn=conn, job_id=job_id, timeout_s=300)
    console.print(f"demo-strict: job {job_id} {final.kind.value}: {final.message or final.reason}")


def _get(url: str, metric: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return ""
    return " ".join(ln.split()[-1] for ln in text.splitlines() if ln.startswith(metric))


def _screenshot(url: str, path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,1100",
                 "--force-device-scale-factor=1", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        driver.get(url)
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: "demo:" in d.find_element(By.ID, "model-title").text)
        wait.until(lambda d: "succeeded" in d.find_element(By.ID, "jobs").text)
        wait.until(lambda d: "refused" in d.find_element(By.ID, "models").text)
        wait.until(lambda d: "ValidationFailed" in d.find_element(By.ID, "dlq").text)
        wait.until(lambda d: "demo" in d.find_element(By.ID, "scorers").text)
        # The whole page, all four panels: as tall as the document.
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(int(height) + 140, 4000))
        time.sleep(1.0)
        driver.save_screenshot(str(path))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
