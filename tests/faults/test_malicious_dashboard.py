"""Hostile requests to the dashboard: refused with a one-line error, nothing outside the DFS
root read or touched, no shell ever run. (The per-parameter contract is in
tests/ops/test_dashboard.py; these are the attack shapes on top.)"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.core.settings import Settings
from headrace.ops.dashboard import Dashboard


@pytest.fixture
def dash(settings: Settings) -> Iterator[Dashboard]:
    d = Dashboard(settings=settings, conn=None)
    d.start()
    try:
        yield d
    finally:
        d.stop()


def _get(url: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


ATTACKS = [
    "api/jobs/..%2F..%2F..%2Fetc%2Fpasswd",
    "api/jobs/%2e%2e%2f%2e%2e%2fetc",
    "api/jobs/x%00y",
    "api/jobs/%24(touch%20pwned)",
    "api/models/%60id%60/1",
    "api/models/a%3Brm%20-rf%20%2F/1",
    "api/models/..%2F..%2F..%2Fetc/1",
    "api/models/iris/..%2F1",
    "api/models/iris/1e999",
    "api/models/iris/-1",
    "api/dlq?stream=..%2F..%2Fetc",
    "api/dlq?stream=a%26%26b",
    "api/dlq?stream=s&max=99999999999999999999999",
    "api/dlq?stream=s&max=-5",
    "api/jobs?limit=NaN",
    "api/jobs?limit=1&limit=2&status=%3Cscript%3E",
    "api/jobs?" + "a" * 3000,
    "static/%2e%2e/%2e%2e/etc/passwd",
    "static/....//....//etc/passwd",
]


@pytest.mark.parametrize("path", ATTACKS)
def test_hostile_dashboard_requests_are_refused_with_one_line_and_touch_nothing(
        dash: Dashboard, settings: Settings, path: str, tmp_path: Path) -> None:
    before = {str(p) for p in tmp_path.parent.rglob("*")}
    status, body = _get(dash.url + path)
    assert 400 <= status < 500, (status, body[:200])
    error = json.loads(body)["error"]
    assert error and "\n" not in error and "Traceback" not in error
    assert "root:" not in body  # /etc/passwd never leaks
    assert {str(p) for p in tmp_path.parent.rglob("*")} == before
    assert not Path("pwned").exists()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_the_dashboard_is_read_only(dash: Dashboard, method: str) -> None:
    status, body = _get(dash.url + "api/jobs", method)
    assert status == 405 and "read-only" in json.loads(body)["error"]
