"""The control plane's probes: ``/livez`` and ``/readyz`` on a small HTTP server thread.

Liveness fails (503) when, for longer than ``liveness_s``:

* the control loop has not ticked (the event loop is blocked), or
* an agent has been busy with one train request (a stuck agent), or
* the Kafka consumer has had no group session (no coordinator or no member id: the session
  was lost and has not come back).

Readiness: the tables are recovered and the consumer has a group session. The app updates the
state from its event loop; the server thread only reads floats and booleans.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class ControlHealth:
    liveness_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    started_at: float = field(default=0.0)
    last_tick: float | None = None
    last_session: float | None = None
    busy_since: float | None = None
    recovered: bool = False
    session: bool = False

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    def tick(self, *, session: bool) -> None:
        now = self.clock()
        self.last_tick = now
        self.session = session
        if session:
            self.last_session = now

    def live(self) -> tuple[bool, dict[str, object]]:
        now = self.clock()
        problems: list[str] = []
        # Before the first tick or session, the start time stands in: a slow start is not dead.
        since_tick = now - (self.last_tick or self.started_at)
        since_session = now - (self.last_session or self.started_at)
        if since_tick > self.liveness_s:
            problems.append(f"control loop has not ticked for {since_tick:.0f}s")
        if since_session > self.liveness_s:
            problems.append(f"no Kafka group session for {since_session:.0f}s")
        if self.busy_since is not None and now - self.busy_since > self.liveness_s:
            problems.append(f"an agent is stuck on one request for {now - self.busy_since:.0f}s")
        return not problems, {"problems": problems, "since_tick_s": round(since_tick, 3),
                              "since_session_s": round(since_session, 3)}

    def ready(self) -> tuple[bool, dict[str, object]]:
        ok = self.recovered and self.session
        return ok, {"tables_recovered": self.recovered, "kafka_session": self.session}


class HealthServer:
    def __init__(self, *, host: str, port: int, health: ControlHealth) -> None:
        state = health

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/livez", "/readyz"):
                    self._send(404, {"error": "not found"})
                    return
                ok, info = state.live() if path == "/livez" else state.ready()
                self._send(200 if ok else 503, {"ok": ok, **info})

            def _send(self, code: int, doc: dict[str, object]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="control-probes", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
