"""The dashboard's HTTP server: static files plus a small JSON API (stdlib ``http.server``).

Strict input: every endpoint declares its parameters; an unknown, repeated or malformed one is
a 400 with a one-line message. Path segments are checked names or numbers; static files are
served from a fixed list read at start-up, so no request can name a path outside it. Errors are
one-line JSON; a traceback never reaches the client.

No ambient trust: with a token (``--token-file``) every ``/api/`` request must carry
``Authorization: Bearer <token>`` (compared in constant time; the page itself holds no data and
reads the token from its URL fragment, which browsers never send). Every response carries a
strict CSP, ``X-Frame-Options: DENY`` and ``nosniff``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import mimetypes
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from headrace.core.errors import ConfigError, HeadraceError, ValidationFailed
from headrace.core.naming import check_name
from headrace.core.ports import bind
from headrace.ops.dashboard import records, studies
from headrace.ops.dashboard import state as st
from headrace.ops.dashboard.rollout import RolloutBoard
from headrace.store.versions import VersionNotFound
from headrace.streams.topics import ControlTopics

STATIC_PACKAGE = "headrace.ops.dashboard_static"
# Sent on every response: the page loads only its own files and is never framed.
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; "
     "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
     "form-action 'none'; frame-ancestors 'none'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)
TOKEN_ENV = "HEADRACE_DASHBOARD_TOKEN_FILE"


def read_token(path: Path) -> str:
    """The bearer token in ``path`` (its first line); a missing or empty file is a one-line
    configuration error."""
    try:
        token = path.read_text().strip().splitlines()[0].strip() if path.stat().st_size else ""
    except (OSError, IndexError, UnicodeDecodeError) as exc:
        raise ConfigError(f"dashboard token file {path}: {type(exc).__name__}") from None
    if len(token) < 16:
        raise ConfigError(f"dashboard token file {path}: the token must be 16 characters or "
                          "more")
    return token


def exposure_warning(host: str, token: str | None) -> str | None:
    """One line when the dashboard listens beyond loopback with no token, else None."""
    if token:
        return None
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"warning: the dashboard listens on {host} with no token: anyone who reaches it "
            f"reads jobs, models and dead letters (give --token-file or {TOKEN_ENV})")


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class IntParam:
    default: int
    lo: int
    hi: int


@dataclass(frozen=True)
class ChoiceParam:
    choices: tuple[str, ...]


@dataclass(frozen=True)
class NameParam:
    what: str
    required: bool = False


Param = IntParam | ChoiceParam | NameParam


def _params(query: str, spec: dict[str, Param]) -> dict[str, Any]:
    raw = parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=20)
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"unknown parameter {unknown[0]!r}; "
                       f"allowed: {', '.join(sorted(spec)) or 'none'}")
    out: dict[str, Any] = {}
    for name, p in spec.items():
        values = raw.get(name)
        if values is not None and len(values) > 1:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"parameter {name!r} given more than once")
        value = values[0] if values else None
        if isinstance(p, IntParam):
            if value is None:
                out[name] = p.default
                continue
            if not re.fullmatch(r"-?\d{1,9}", value):
                raise ApiError(HTTPStatus.BAD_REQUEST, f"parameter {name!r} must be an integer")
            n = int(value)
            if not p.lo <= n <= p.hi:
                raise ApiError(HTTPStatus.BAD_REQUEST,
                               f"parameter {name!r} must be between {p.lo} and {p.hi}")
            out[name] = n
        elif isinstance(p, ChoiceParam):
            if value is not None and value not in p.choices:
                raise ApiError(HTTPStatus.BAD_REQUEST,
                               f"parameter {name!r} must be one of {', '.join(p.choices)}")
            out[name] = value
        else:
            if value is None:
                if p.required:
                    raise ApiError(HTTPStatus.BAD_REQUEST, f"parameter {name!r} is required")
                out[name] = None
                continue
            out[name] = _name(value, p.what)
    return out


def _name(value: str, what: str) -> str:
    try:
        return check_name(value, what=what)
    except ValidationFailed as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None


def _version(value: str) -> int:
    if not re.fullmatch(r"[1-9]\d{0,8}", value):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"version {value[:20]!r} must be a positive integer")
    return int(value)


def static_files() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, content type) for every file shipped in dashboard_static."""
    out: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files(STATIC_PACKAGE).iterdir():
        if entry.is_file() and not entry.name.startswith((".", "_")):
            ctype = mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            if ctype.startswith("text/") or ctype.endswith("javascript"):
                ctype += "; charset=utf-8"
            out[entry.name] = (entry.read_bytes(), ctype)
    return out


JOB_STATUSES = ("queued", "running", "retrying", "succeeded", "failed", "cancelled", "duplicate",
                "unknown")


class Api:
    """Routes: path pattern -> (parameter spec, handler)."""

    def __init__(self, state: st.DashboardState) -> None:
        self.state = state
        self.routes: list[tuple[re.Pattern[str], dict[str, Param],
                                Callable[..., Any]]] = [
            (re.compile(r"/api/overview"), {}, self.overview),
            (re.compile(r"/api/jobs"), {"limit": IntParam(50, 1, 500),
                                        "status": ChoiceParam(JOB_STATUSES)}, self.jobs),
            (re.compile(r"/api/jobs/([^/]+)"), {"logs": IntParam(200, 0, st.MAX_LOG_LINES)},
             self.job),
            (re.compile(r"/api/models"), {}, self.models),
            (re.compile(r"/api/models/([^/]+)/([^/]+)"), {}, self.model_version),
            (re.compile(r"/api/scorers"), {}, self.scorers),
            (re.compile(r"/api/dlq"), {"stream": NameParam("stream name", required=True),
                                       "max": IntParam(20, 0, 500)}, self.dlq),
            (re.compile(r"/api/studies"), {}, self.studies),
            (re.compile(r"/api/drift"), {"stream": NameParam("stream name")}, self.drift),
            (re.compile(r"/api/rollout"), {}, self.rollout),
            (re.compile(r"/api/health"), {}, self.health),
        ]
        self.rollout_board = RolloutBoard(state.conn, ControlTopics.of(state.settings))

    def handle(self, path: str, query: str) -> Any:
        for pattern, spec, fn in self.routes:
            m = pattern.fullmatch(path)
            if m:
                return fn(*m.groups(), **_params(query, spec))
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint {path[:100]!r}")

    def overview(self) -> dict[str, Any]:
        s = self.state.settings
        streams = self.state.streams()
        return {"streams": [x["name"] for x in streams], "stream_details": streams,
                "configured_streams": list(s.streams), "dfs_root": str(s.dfs_root),
                "kafka": self.state.conn.bootstrap if self.state.conn else None,
                "kafka_error": self.state.kafka_error, "job_events": self.state.jobs.events}

    def jobs(self, *, limit: int, status: str | None) -> dict[str, Any]:
        return {"jobs": self.state.job_rows(limit=limit, status=status)}

    def job(self, job_id: str, *, logs: int) -> dict[str, Any]:
        job_id = _name(job_id, "job id")
        view = self.state.jobs.get(job_id, logs=logs)
        dfs = records.dfs_jobs(self.state.root, limit=10_000).get(job_id)
        if view is None and dfs is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no job {job_id}")
        out = view or {"job_id": job_id, "status": "unknown", "logs": []}
        out["dfs"] = dfs
        detail = records.job_detail(self.state.root, job_id) if dfs else {"history": None}
        # The DFS's word wins, but an unknown there keeps what the job's events said.
        out.update({k: v for k, v in detail.items() if v is not None or k not in out})
        out["log_file"] = records.job_log_file(self.state.root, job_id, lines=logs) if logs else []
        return out

    def models(self) -> dict[str, Any]:
        return {"models": records.models(self.state.root)}

    def model_version(self, name: str, version: str) -> dict[str, Any]:
        name = _name(name, "model name")
        try:
            return records.model_version(self.state.root, name, _version(version))
        except VersionNotFound as exc:
            raise ApiError(HTTPStatus.NOT_FOUND, str(exc)) from None

    def scorers(self) -> dict[str, Any]:
        return {"scorers": self.state.scorers.view()}

    def studies(self) -> dict[str, Any]:
        return studies.studies(self.state.root)

    def drift(self, *, stream: str | None) -> dict[str, Any]:
        out = self.state.drift.view(stream)
        if self.state.conn is None:
            out["error"] = "no Kafka given (--bootstrap): drift unknown"
        return out

    def rollout(self) -> dict[str, Any]:
        return self.rollout_board.view()

    def health(self) -> dict[str, Any]:
        return self.state.health.view()

    def dlq(self, *, stream: str, max: int) -> dict[str, Any]:
        return self.state.dlq(stream, max_letters=max)


def make_handler(api: Api, files: dict[str, tuple[bytes, str]], token: str | None = None
                 ) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "headrace-dashboard"
        sys_version = ""

        def end_headers(self) -> None:
            for name, value in SECURITY_HEADERS:  # every response, errors included
                self.send_header(name, value)
            super().end_headers()

        def _authorised(self) -> bool:
            if expected is None:
                return True
            given = (self.headers.get("Authorization") or "").strip().encode()
            return hmac.compare_digest(given, expected)

        def do_GET(self) -> None:
            try:
                url = urlsplit(self.path)
                path = url.path
                if len(self.path) > 2048:
                    raise ApiError(HTTPStatus.REQUEST_URI_TOO_LONG, "URL too long")
                if path.startswith("/api/") and not self._authorised():
                    raise ApiError(HTTPStatus.UNAUTHORIZED,
                                   "this dashboard needs Authorization: Bearer <token>")
                if path in ("/", "/index.html"):
                    self._file("index.html")
                elif path.startswith("/static/"):
                    self._file(path.removeprefix("/static/"))
                elif path.startswith("/api/"):
                    self._json(HTTPStatus.OK, api.handle(path, url.query))
                else:
                    raise ApiError(HTTPStatus.NOT_FOUND, "not found")
            except ApiError as exc:
                self._json(exc.status, {"error": exc.message})
            except HeadraceError as exc:
                self._json(HTTPStatus.BAD_REQUEST if isinstance(exc, ValidationFailed)
                           else HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)})
            except (BrokenPipeError, ConnectionResetError):
                pass
            except Exception as exc:
                print(f"dashboard: {type(exc).__name__}: {exc}", file=sys.stderr)
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR,
                           {"error": f"internal error ({type(exc).__name__})"})

        def do_POST(self) -> None:
            self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the dashboard is read-only"})

        do_PUT = do_DELETE = do_PATCH = do_POST

        def _file(self, name: str) -> None:
            entry = files.get(name)  # a fixed set: no path ever reaches the filesystem
            if entry is None:
                raise ApiError(HTTPStatus.NOT_FOUND, "not found")
            body, ctype = entry
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: HTTPStatus, data: Any) -> None:
            body = json.dumps(data, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if status == HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", 'Bearer realm="headrace"')
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the stack prints its own status lines

    return Handler


def make_server(api: Api, *, host: str, port: int, token: str | None = None
                ) -> ThreadingHTTPServer:
    handler = make_handler(api, static_files(), token)
    server = bind(lambda: ThreadingHTTPServer((host, port), handler), host=host, port=port,
                  setting="`headrace dashboard --port` or `headrace up --dashboard-port`")
    server.daemon_threads = True
    return server
