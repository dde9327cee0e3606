"""The dashboard reads a scorer's model version from its /metrics as the manifest version."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import generate_latest

from headrace.ops.dashboard.scrape import scrape
from headrace.scorers.engine.metrics import ScorerMetrics


@pytest.fixture
def metrics_url() -> Iterator[tuple[str, ScorerMetrics]]:
    m = ScorerMetrics(stream="demo", model="demo")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(m.registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", m
    finally:
        server.shutdown()
        server.server_close()


def test_the_dashboard_shows_the_scorers_manifest_version_not_a_timestamp(
        metrics_url: tuple[str, ScorerMetrics]) -> None:
    url, m = metrics_url
    m.model_version.labels(model="demo").set(5)
    m.model_swaps.labels(model="demo").inc()  # its `_created` gauge holds a Unix time
    assert "headrace_scorer_model_swaps_created" in generate_latest(m.registry).decode()
    assert scrape(url).model == "demo:5"
