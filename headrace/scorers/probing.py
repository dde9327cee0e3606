"""HTTP probes and metrics: ``/livez``, ``/readyz``, ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from headrace.core.ports import bind
from headrace.scorers.metrics import ScorerMetrics


class ProbeState:
    """What the probes report. Liveness: the poll loop made progress within ``liveness_s``
    (always true while starting: a startup probe covers model loading). Readiness: a model is
    loaded and warmed, partitions are assigned, and the scorer is not stopping."""

    def __init__(self, *, liveness_s: float) -> None:
        self.liveness_s = liveness_s
        self.started = False
        self.stopping = False
        self.last_progress: Callable[[], float] = time.monotonic
        self.model_ready: Callable[[], bool] = lambda: False
        self.assigned: Callable[[], int] = lambda: 0
        self.model_ref: Callable[[], str | None] = lambda: None

    def live(self) -> tuple[bool, dict[str, object]]:
        if not self.started:
            return True, {"phase": "starting"}
        idle = time.monotonic() - self.last_progress()
        return idle <= self.liveness_s, {"phase": "running", "since_progress_s": round(idle, 3)}

    def ready(self) -> tuple[bool, dict[str, object]]:
        model = self.model_ready()
        parts = self.assigned()
        ok = model and parts > 0 and self.started and not self.stopping
        return ok, {"model": self.model_ref(), "model_ready": model, "partitions": parts,
                    "stopping": self.stopping}


class ProbeServer:
    def __init__(self, *, host: str, port: int, state: ProbeState, metrics: ScorerMetrics) -> None:
        state_, metrics_ = state, metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    metrics_.ready.set(1 if state_.ready()[0] else 0)
                    self._send(200, generate_latest(metrics_.registry), CONTENT_TYPE_LATEST)
                elif path in ("/livez", "/readyz"):
                    ok, info = state_.live() if path == "/livez" else state_.ready()
                    self._send(200 if ok else 503, json.dumps({"ok": ok, **info}).encode(),
                               "application/json")
                else:
                    self._send(404, b'{"error":"not found"}', "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                # A prober that gave up (its timeout) is not the scorer's error: no traceback.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = bind(lambda: ThreadingHTTPServer((host, port), Handler), host=host,
                            port=port, setting="--http-port or HEADRACE_SCORER_HTTP_PORT")
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="probes",
                                        daemon=True)

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
