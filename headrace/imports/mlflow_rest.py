"""A small client of MLflow's REST API (tracking, registry, proxied artifacts) on the standard
library alone.

MLflow 3's Python client pins ``protobuf<7`` and this environment has protobuf 7 (TensorFlow's
pin), so the client cannot live beside Headrace; the REST API is the documented, stable
surface and is all the import, export and tracking paths need. The server itself runs from its
own virtual environment (``tools/mlflow_server.py``).

Errors: an unreachable server, a timeout or a 5xx answer is ``MlflowUnavailable`` (retriable);
a 4xx answer is ``MlflowRefused`` (permanent), carrying MLflow's ``error_code``.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from headrace.core.errors import PermanentError, RetriableError

API = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
TIMEOUT_S = 30.0


class MlflowUnavailable(RetriableError):
    """The tracking server did not answer, or answered with a server error."""


class MlflowRefused(PermanentError):
    """The tracking server refused the request (4xx); ``code`` is MLflow's error_code."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class MlflowClient:
    """The tracking server at ``base`` (``http://HOST:PORT``, no trailing slash)."""

    base: str
    timeout_s: float = TIMEOUT_S

    @classmethod
    def at(cls, uri: str, *, timeout_s: float = TIMEOUT_S) -> MlflowClient:
        parsed = urllib.parse.urlparse(uri)
        if parsed.username is not None or parsed.password is not None:
            # Never echoed: it would carry the password into logs and manifests.
            raise MlflowRefused("the MLflow tracking URI carries credentials in it; Headrace "
                                "takes an http://HOST:PORT tracking server without them")
        try:
            parsed.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise MlflowRefused(f"MLflow tracking URI {uri!r}: its port is not a number"
                                ) from None
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise MlflowRefused(f"MLflow tracking URI {uri!r}: expected http://HOST:PORT "
                                f"(a tracking server)")
        return cls(uri.rstrip("/"), timeout_s)

    # -- the tracking and registry API ---------------------------------------------------

    def get(self, endpoint: str, **params: str) -> dict[str, Any]:
        query = urllib.parse.urlencode(params)
        return self._json("GET", f"{API}/{endpoint}" + (f"?{query}" if query else ""))

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"{API}/{endpoint}", body)

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        raw = self._call(method, path, data, "application/json")
        try:
            out = json.loads(raw or b"{}")
        except ValueError:
            raise MlflowUnavailable(f"MLflow at {self.base}: {method} {path} answered "
                                    f"something that is not JSON") from None
        return out if isinstance(out, dict) else {}

    def _call(self, method: str, path: str, data: bytes | None, ctype: str) -> bytes:
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body: bytes = resp.read()
                return body
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                err = json.loads(text)
            except ValueError:
                err = None
            if isinstance(err, dict):
                code, msg = str(err.get("error_code", "")), str(err.get("message", text))
            else:
                code, msg = "", text.strip()[:300]
            where = f"MLflow at {self.base}: {method} {path.split('?')[0]}"
            if exc.code >= 500:
                raise MlflowUnavailable(f"{where}: HTTP {exc.code}: {msg}") from None
            raise MlflowRefused(f"{where}: {msg}", code) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError,
                http.client.HTTPException) as exc:
            why = getattr(exc, "reason", exc)
            raise MlflowUnavailable(f"MLflow at {self.base} is unreachable: {why}") from None

    # -- proxied artifacts (``mlflow-artifacts:/...`` URIs) -------------------------------

    def list_artifacts(self, path: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"path": path})
        out = self._json("GET", f"{ARTIFACTS}?{query}")
        files = out.get("files", [])
        return [f for f in files if isinstance(f, dict)]

    def download(self, path: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(self._call("GET", f"{ARTIFACTS}/{_quote(path)}", None,
                                    "application/octet-stream"))

    def upload(self, local: Path, path: str) -> None:
        self._call("PUT", f"{ARTIFACTS}/{_quote(path)}", local.read_bytes(),
                   "application/octet-stream")

    def walk(self, path: str) -> Iterator[str]:
        """Every file under ``path`` (relative to it)."""
        for f in self.list_artifacts(path):
            name = str(f.get("path", ""))
            full = f"{path}/{name}" if path else name
            rel = str(PurePosixPath(full).relative_to(path)) if path else full
            if f.get("is_dir"):
                yield from (f"{rel}/{sub}" for sub in self.walk(full))
            else:
                yield rel


def proxied_path(artifact_uri: str) -> str | None:
    """The artifact proxy's path of an ``mlflow-artifacts:`` URI (with or without a host);
    None for any other scheme."""
    parsed = urllib.parse.urlparse(artifact_uri)
    if parsed.scheme != "mlflow-artifacts":
        return None
    return parsed.path.lstrip("/")


def _quote(path: str) -> str:
    return urllib.parse.quote(path.lstrip("/"))
