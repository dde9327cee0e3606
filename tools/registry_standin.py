"""A stand-in for a Schema Registry where no real one can be built: Headrace's own small server of
the Confluent REST API subset its clients and confluent-kafka's serdes use (register, look up by
id and by subject version, subjects, compatibility config), schemas in memory, on loopback.

It is NOT a real registry: it checks no compatibility (every new schema is accepted) and keeps
nothing across restarts. tests/real_registry.py uses it only when Apicurio Registry
(tools/registry.py) cannot be built here, and says so; a test that needs compatibility checks
asks for Apicurio alone. Ids are global and an equal schema keeps its id, as Confluent's do.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from headrace.core.ports import free_port

_SUBJECT = r"(?P<s>[^/]+)"
_VERSION = r"(?P<v>latest|-1|\d+)"


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[int, dict[str, Any]] = {}
        self.ids: dict[str, int] = {}  # canonical key -> id
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version
        self.config: dict[str, str] = {}

    @staticmethod
    def _key(schema: dict[str, Any]) -> str:
        text = schema["schema"]
        if schema.get("schemaType", "AVRO") in ("AVRO", "JSON"):
            with contextlib.suppress(ValueError):  # kept as sent
                text = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        return json.dumps([schema.get("schemaType", "AVRO"), text, schema.get("references", [])],
                          sort_keys=True)

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        with self.lock:
            key = self._key(schema)
            sid = self.ids.get(key)
            if sid is None:
                sid = len(self.by_id) + 1
                self.ids[key] = sid
                self.by_id[sid] = schema
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return sid

    def version(self, subject: str, v: str) -> dict[str, Any] | None:
        versions = self.subjects.get(subject)
        if not versions:
            return None
        n = len(versions) if v in ("latest", "-1") else int(v)
        if not 1 <= n <= len(versions):
            return None
        sid = versions[n - 1]
        return {"subject": subject, "version": n, "id": sid, **_body(self.by_id[sid])}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    out = {"schema": schema["schema"]}
    if schema.get("schemaType", "AVRO") != "AVRO":
        out["schemaType"] = schema["schemaType"]
    if schema.get("references"):
        out["references"] = schema["references"]
    return out


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *_: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _missing(self, code: int, what: str) -> None:
        self._send(404, {"error_code": code, "message": f"{what} not found"})

    def _json(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def _path(self) -> str:
        path = urlsplit(self.path).path
        prefix = self.server.prefix
        return path[len(prefix):] if path.startswith(prefix) else "\0"

    def do_GET(self) -> None:
        store, path = self.server.store, self._path()
        if path == "/subjects":
            return self._send(200, sorted(store.subjects))
        if m := re.fullmatch(r"/schemas/ids/(\d+)", path):
            schema = store.by_id.get(int(m[1]))
            return self._send(200, _body(schema)) if schema else self._missing(40403, "Schema")
        if m := re.fullmatch(rf"/subjects/{_SUBJECT}/versions", path):
            versions = store.subjects.get(unquote(m["s"]))
            return (self._send(200, list(range(1, len(versions) + 1))) if versions
                    else self._missing(40401, "Subject"))
        if m := re.fullmatch(rf"/subjects/{_SUBJECT}/versions/{_VERSION}", path):
            got = store.version(unquote(m["s"]), m["v"])
            return self._send(200, got) if got else self._missing(40402, "Version")
        if m := re.fullmatch(rf"/config(?:/{_SUBJECT})?", path):
            level = store.config.get(unquote(m["s"] or ""), store.config.get("", "BACKWARD"))
            return self._send(200, {"compatibilityLevel": level})
        return self._missing(404, "Path")

    def do_POST(self) -> None:
        store, path = self.server.store, self._path()
        try:
            body = self._json()
        except ValueError:
            return self._send(422, {"error_code": 42201, "message": "Invalid JSON"})
        if m := re.fullmatch(rf"/subjects/{_SUBJECT}/versions", path):
            if not isinstance(body.get("schema"), str):
                return self._send(422, {"error_code": 42201, "message": "Invalid schema"})
            return self._send(200, {"id": store.register(unquote(m["s"]), body)})
        if m := re.fullmatch(rf"/subjects/{_SUBJECT}", path):
            subject = unquote(m["s"])
            key = store._key(body)
            for n, sid in enumerate(store.subjects.get(subject, ()), 1):
                if store._key(store.by_id[sid]) == key:
                    return self._send(200, {"subject": subject, "version": n, "id": sid,
                                            **_body(store.by_id[sid])})
            return self._missing(40403, "Schema")
        return self._missing(404, "Path")

    def do_PUT(self) -> None:
        store, path = self.server.store, self._path()
        if m := re.fullmatch(rf"/config(?:/{_SUBJECT})?", path):
            level = str(self._json().get("compatibility", "BACKWARD"))
            store.config[unquote(m["s"] or "")] = level
            return self._send(200, {"compatibility": level})
        return self._missing(404, "Path")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    store: _Store
    prefix: str


class StandinRegistry:
    """The stand-in on a free loopback port; ``url`` is its Confluent-compatible base URL."""

    def __init__(self, prefix: str = "/apis/ccompat/v7", port: int = 0) -> None:
        self.port = port or free_port()
        self.server = _Server(("127.0.0.1", self.port), _Handler)
        self.server.store = _Store()
        self.server.prefix = prefix
        self.url = f"http://127.0.0.1:{self.port}{prefix}"
        self._thread: threading.Thread | None = None

    def start(self) -> StandinRegistry:
        self._thread = threading.Thread(target=self.server.serve_forever, name="registry-standin",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever: only once started
            self.server.shutdown()
            self._thread = None
        self.server.server_close()

    def __enter__(self) -> StandinRegistry:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
