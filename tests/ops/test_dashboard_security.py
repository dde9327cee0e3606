"""Issue 34: the dashboard shows the control plane's and each scorer's health (their real
/livez and /readyz over HTTP), takes a bearer token (constant-time compared), warns when it
listens beyond loopback with none, and sends CSP, X-Frame-Options and nosniff on every
response."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main
from headrace.core.errors import ConfigError
from headrace.core.probe_server import ProbeHTTPServer
from headrace.core.settings import load_settings
from headrace.ops.dashboard import Dashboard
from headrace.ops.dashboard.server import exposure_warning, read_token
from tests.fixtures import eventually

TOKEN = "s3cret-token-0123456789"


class Probed:
    def __init__(self, live: bool, ready: bool, why: str) -> None:
        self.state = (live, ready, why)

    def live(self) -> tuple[bool, dict[str, object]]:
        return self.state[0], {"since_progress_s": 0.1}

    def ready(self) -> tuple[bool, dict[str, object]]:
        return self.state[1], {"reason": self.state[2]}


@pytest.fixture
def probed() -> Iterator[tuple[str, str]]:
    """A control plane that is live but not ready, and a scorer that is both (its /metrics
    beside its probes, as the scorer serves them)."""
    control = ProbeHTTPServer(host="127.0.0.1", port=0, name="t-control",
                              state=Probed(True, False, "agent router crashed")).start()
    scorer = ProbeHTTPServer(host="127.0.0.1", port=0, name="t-scorer",
                             state=Probed(True, True, "serving iris:2"),
                             pages={"/metrics": lambda: (b"", "text/plain")}).start()
    yield f"http://127.0.0.1:{control.port}", f"http://127.0.0.1:{scorer.port}/metrics"
    control.stop()
    scorer.stop()


@pytest.fixture
def dash(tmp_path: Path, probed: tuple[str, str]) -> Iterator[Dashboard]:
    control, scorer = probed
    d = Dashboard(settings=load_settings(dfs_root=tmp_path), conn=None, token=TOKEN,
                  control_url=control, scorer_urls=[scorer])
    d.start()
    yield d
    d.stop()


def _call(url: str, *, token: str | None = None, method: str = "GET"
          ) -> tuple[int, Any, Any]:
    req = urllib.request.Request(url, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_every_response_carries_csp_frame_and_sniff_headers(dash: Dashboard) -> None:
    for path, token, method, status in [
            ("", None, "GET", 200), ("static/app.js", None, "GET", 200),
            ("api/health", TOKEN, "GET", 200), ("api/health", None, "GET", 401),
            ("api/nothing", TOKEN, "GET", 404), ("nothing", None, "GET", 404),
            ("api/jobs", TOKEN, "POST", 405)]:
        code, headers, _ = _call(dash.url + path, token=token, method=method)
        assert code == status, path
        assert headers["X-Frame-Options"] == "DENY", path
        assert headers["X-Content-Type-Options"] == "nosniff", path
        csp = headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, path


def test_the_api_needs_the_bearer_token_and_the_page_reads_it_from_the_fragment(
        dash: Dashboard) -> None:
    for wrong in (None, "", TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
        code, headers, body = _call(dash.url + "api/jobs", token=wrong)
        assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert json.loads(body) == {"error": "this dashboard needs Authorization: Bearer <token>"}
    assert _call(dash.url + "api/jobs", token=TOKEN)[0] == 200
    assert b"#token=" not in _call(dash.url)[2]  # the page holds no data, no token
    assert b"headrace-token" in _call(dash.url + "static/app.js")[2]


def test_the_health_panel_shows_the_control_planes_and_each_scorers_probes(
        dash: Dashboard, probed: tuple[str, str]) -> None:
    control, scorer = probed

    def health() -> dict[str, Any] | None:
        got = json.loads(_call(dash.url + "api/health", token=TOKEN)[2])
        return got if got["control_plane"] and got["scorers"] else None

    h = eventually(health, timeout_s=20, interval_s=0.1, what="the first probes")
    cp = h["control_plane"]
    assert cp["url"] == control and cp["ok"] is False
    assert cp["livez"]["ok"] is True and cp["livez"]["status"] == 200
    assert cp["readyz"] == {"ok": False, "status": 503,
                            "body": {"ok": False, "reason": "agent router crashed"}}
    [sc] = h["scorers"]
    assert sc["url"] == scorer and sc["ok"] is True
    assert sc["readyz"]["body"]["reason"] == "serving iris:2"
    assert h["control_plane_note"] is None


def test_a_probe_that_cannot_be_reached_reads_down_with_the_error(tmp_path: Path) -> None:
    d = Dashboard(settings=load_settings(dfs_root=tmp_path), conn=None,
                  control_url="http://127.0.0.1:9")  # discard: nothing listens
    d.state.health.refresh([])
    cp = d.state.health.view()["control_plane"]
    d.server.server_close()
    assert cp["ok"] is False and cp["livez"]["status"] is None and cp["livez"]["error"]


@pytest.mark.parametrize(("host", "token", "warns"), [
    ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False),
    ("0.0.0.0", None, True), ("::", None, True), ("10.1.2.3", None, True),
    ("dash.example", None, True), ("0.0.0.0", TOKEN, False)])
def test_it_warns_in_one_line_when_bound_beyond_loopback_without_a_token(
        host: str, token: str | None, warns: bool) -> None:
    said = exposure_warning(host, token)
    assert (said is not None) == warns
    if said:
        assert "\n" not in said and host in said and "--token-file" in said


def test_a_bad_token_file_is_one_line_and_a_non_zero_exit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match="16 characters"):
        read_token(short)
    good = tmp_path / "good"
    good.write_text(TOKEN + "\n")
    assert read_token(good) == TOKEN
    assert main(["--dfs-root", str(tmp_path), "dashboard", "--token-file",
                 str(tmp_path / "missing")]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "token file" in err and "Traceback" not in err
