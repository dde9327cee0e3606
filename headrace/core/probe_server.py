"""One small HTTP server thread for probes: ``/livez`` and ``/readyz`` from a state's
``live()`` and ``ready()`` (200 or 503, with their JSON), and any other GET pages its owner adds
(the scorer's ``/metrics``). The scorer and the control plane each run one."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from headrace.core.ports import bind

Page = Callable[[], tuple[bytes, str]]  # the body and its content type
_JSON = "application/json"


class Probed(Protocol):
    def live(self) -> tuple[bool, dict[str, object]]: ...

    def ready(self) -> tuple[bool, dict[str, object]]: ...


class ProbeHTTPServer:
    def __init__(self, *, host: str, port: int, state: Probed, name: str,
                 pages: Mapping[str, Page] | None = None, setting: str | None = None) -> None:
        """``setting``: the option that moves the port, named in the one-line error when it
        is taken (without it, the ``OSError`` goes to the caller)."""
        extra = dict(pages or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in extra:
                    self._send(200, *extra[path]())
                elif path in ("/livez", "/readyz"):
                    ok, info = state.live() if path == "/livez" else state.ready()
                    self._send(200 if ok else 503, json.dumps({"ok": ok, **info}).encode(), _JSON)
                else:
                    self._send(404, b'{"error":"not found"}', _JSON)

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                # A prober that gave up (its timeout) is not the server's error: no traceback.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        def make() -> ThreadingHTTPServer:
            return ThreadingHTTPServer((host, port), Handler)

        self._server = make() if setting is None else bind(make, host=host, port=port,
                                                           setting=setting)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=name,
                                        daemon=True)

    def start(self) -> ProbeHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
