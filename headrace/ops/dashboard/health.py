"""Health as the dashboard shows it: the control plane's ``/livez`` and ``/readyz``, and each
scorer's, probed over HTTP. A scorer's probes live beside its ``/metrics`` (core.probe_server),
so its URL is the metrics URL the dashboard already scrapes (scrape.py) with the path swapped.
A probe that cannot be reached reads as down with the error, never as healthy."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

PROBES = ("livez", "readyz")
MAX_BODY = 64 * 1024


def probe(url: str, *, timeout_s: float = 2.0) -> dict[str, Any]:
    """One probe: ``ok`` (True on 200, False otherwise), the HTTP status, and its JSON body
    (the reason a probe gives) or the error that kept it from answering."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            status, raw = r.status, r.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(MAX_BODY)
    except (OSError, ValueError) as exc:
        return {"ok": False, "status": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return {"ok": status == 200, "status": status,
            "body": body if isinstance(body, dict) else None}


def probe_urls(base: str) -> dict[str, str]:
    """``/livez`` and ``/readyz`` beside ``base`` (a scorer's metrics URL, or the control
    plane's ``http://host:port``)."""
    parts = urlsplit(base if "://" in base else f"http://{base}")
    return {p: urlunsplit((parts.scheme, parts.netloc, f"/{p}", "", "")) for p in PROBES}


class HealthBoard:
    """The latest probe of the control plane (when its URL is given) and of each scorer."""

    def __init__(self, control_url: str | None) -> None:
        self.control_url = control_url
        self.lock = threading.Lock()
        self._control: dict[str, Any] | None = None
        self._scorers: dict[str, dict[str, Any]] = {}

    def refresh(self, scorer_urls: list[str]) -> None:
        control = (self._probe_all(self.control_url) if self.control_url else None)
        scorers = {url: self._probe_all(url) for url in scorer_urls}
        with self.lock:
            self._control, self._scorers = control, scorers

    @staticmethod
    def _probe_all(base: str) -> dict[str, Any]:
        got = {name: probe(url) for name, url in probe_urls(base).items()}
        return {"url": base, **got, "ok": all(g["ok"] for g in got.values())}

    def view(self) -> dict[str, Any]:
        with self.lock:
            return {"control_plane": self._control,
                    "control_plane_note": None if self.control_url else (
                        "no control plane URL given (--control-url or "
                        "HEADRACE_DASHBOARD_CONTROL_URL): its health is not shown"),
                    "scorers": list(self._scorers.values())}
