"""The registry client: each id fetched once, failures classified, credentials kept out of sight."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from headrace.core.errors import ConfigError, PermanentError, RetriableError
from headrace.core.ports import free_port
from headrace.core.settings import load_settings
from headrace.streams.schema_registry import (
    NotWireFormat,
    RegistryConfig,
    RegistryRefused,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRegistry,
    frame,
    registry_config,
    unframe,
    wire_schema_id,
)
from tests.real_registry import RunningRegistry

AVRO = json.dumps({"type": "record", "name": "R", "namespace": "t",
                   "fields": [{"name": "x", "type": "double"}]})


def _subject() -> str:
    return f"t-{uuid.uuid4().hex[:10]}-value"


def test_a_registered_schema_is_fetched_once_then_served_from_memory(
        schema_registry: RunningRegistry) -> None:
    writer = SchemaRegistry(RegistryConfig(url=schema_registry.url))
    sid = writer.register(_subject(), AVRO)
    reader = SchemaRegistry(RegistryConfig(url=schema_registry.url))
    got = [reader.fetch_schema(sid) for _ in range(3)]
    kind, text, refs = got[0]
    assert kind == "AVRO" and json.loads(text) == json.loads(AVRO) and refs == ()
    assert got[1] is got[0] and got[2] is got[0]
    assert reader.fetches == 1


def test_an_equal_schema_keeps_its_id(schema_registry: RunningRegistry) -> None:
    client = SchemaRegistry(RegistryConfig(url=schema_registry.url))
    subject = _subject()
    assert client.register(subject, AVRO) == client.register(subject, AVRO)


def test_an_unknown_id_is_permanent_and_names_the_id(schema_registry: RunningRegistry) -> None:
    client = SchemaRegistry(RegistryConfig(url=schema_registry.url))
    with pytest.raises(SchemaNotFound) as err:
        client.fetch_schema(987_654_321)
    assert isinstance(err.value, PermanentError)
    assert err.value.schema_id == 987_654_321 and "987654321" in str(err.value)
    # A miss is remembered a while: a stream of bad ids does not hammer the registry.
    with pytest.raises(SchemaNotFound):
        client.fetch_schema(987_654_321)
    assert client.fetches == 1


def test_an_unreachable_registry_is_retriable() -> None:
    client = SchemaRegistry(RegistryConfig(url=f"http://127.0.0.1:{free_port()}", timeout_s=2))
    with pytest.raises(RegistryUnavailable) as err:
        client.fetch_schema(1)
    assert isinstance(err.value, RetriableError) and err.value.schema_id == 1


class _Scripted(BaseHTTPRequestHandler):
    """Answers each GET with the next scripted (status, body) or hangs; records the headers."""

    script: list[tuple[int, Any] | None]
    seen: list[dict[str, str]]
    release: threading.Event

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        step = self.script.pop(0) if self.script else (500, {"message": "script exhausted"})
        if step is None:
            self.release.wait(10)  # a registry that stopped answering
            return
        code, body = step
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted() -> Iterator[Any]:
    handler: Any = type("H", (_Scripted,), {"script": [], "seen": [], "release": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_a_5xx_is_retriable_and_not_cached(scripted: Any, status: int) -> None:
    scripted.script[:] = [(status, {"message": "busy"}), (200, {"schema": AVRO})]
    client = SchemaRegistry(RegistryConfig(url=scripted.url, timeout_s=5))
    with pytest.raises(RegistryUnavailable) as err:
        client.fetch_schema(7)
    assert str(status) in str(err.value) and err.value.schema_id == 7
    assert client.fetch_schema(7).schema_str == AVRO  # the registry is back
    assert len(scripted.seen) == 2


def test_a_registry_that_stops_answering_is_retriable(scripted: Any) -> None:
    scripted.script[:] = [None]
    client = SchemaRegistry(RegistryConfig(url=scripted.url, timeout_s=0.5))
    with pytest.raises(RegistryUnavailable, match="unreachable"):
        client.fetch_schema(3)


def test_an_answer_that_is_not_the_apis_json_is_retriable(scripted: Any) -> None:
    scripted.script[:] = [(200, ["not", "a", "schema"])]
    client = SchemaRegistry(RegistryConfig(url=scripted.url))
    with pytest.raises(RegistryUnavailable):
        client.fetch_schema(3)


def test_the_schema_type_and_references_come_through(scripted: Any) -> None:
    scripted.script[:] = [(200, {"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF",
                                 "references": [{"name": "a.proto", "subject": "a",
                                                 "version": 2}]})]
    client = SchemaRegistry(RegistryConfig(url=scripted.url))
    kind, _text, refs = client.fetch_schema(11)
    assert kind == "PROTOBUF" and [tuple(r) for r in refs] == [("a.proto", "a", 2)]


def test_credentials_come_from_a_file_and_never_show(scripted: Any,
                                                     tmp_path: Path) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    auth = tmp_path / "auth"
    auth.write_text(f"scorer:{secret}\n")
    settings = load_settings(schema_registry_url=scripted.url + "/",
                             schema_registry_auth_file=auth)
    config = registry_config(settings)
    assert config is not None and config.url == scripted.url
    assert secret not in repr(config) and secret not in repr(settings)
    scripted.script[:] = [(401, {"message": "Unauthorized"})]
    client = SchemaRegistry(config)
    with pytest.raises(RegistryRefused) as err:
        client.fetch_schema(5)
    sent = scripted.seen[0]["Authorization"]
    assert base64.b64decode(sent.removeprefix("Basic ")).decode() == f"scorer:{secret}"
    assert secret not in str(err.value)


@pytest.mark.parametrize("content, fragment", [
    ("", "must hold one line user:password"),
    ("no-colon\n", "must hold one line user:password"),
    (":only-password\n", "must hold one line user:password"),
])
def test_a_bad_auth_file_is_a_config_error_naming_the_file_only(
        tmp_path: Path, content: str, fragment: str) -> None:
    auth = tmp_path / "auth"
    auth.write_text(content)
    settings = load_settings(schema_registry_url="http://127.0.0.1:1",
                             schema_registry_auth_file=auth)
    with pytest.raises(ConfigError, match=fragment) as err:
        registry_config(settings)
    assert "only-password" not in str(err.value)


def test_a_missing_auth_file_is_a_config_error(tmp_path: Path) -> None:
    settings = load_settings(schema_registry_url="http://127.0.0.1:1",
                             schema_registry_auth_file=tmp_path / "absent")
    with pytest.raises(ConfigError, match="absent"):
        registry_config(settings)


@pytest.mark.parametrize("url, fragment", [
    ("ftp://h/x", "http"),
    ("http://user:pw@h:1/x", "must not hold credentials"),
    ("http://h:99999", "(?i)port"),
])
def test_a_bad_registry_url_is_refused_at_start(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as err:
        load_settings(schema_registry_url=url)
    assert "pw@" not in str(err.value)


def test_the_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081/apis/ccompat/v7")
    assert load_settings().schema_registry_url == "http://127.0.0.1:8081/apis/ccompat/v7"
    monkeypatch.delenv("HEADRACE_SCHEMA_REGISTRY_URL")
    assert registry_config(load_settings()) is None


def test_the_wire_format_round_trips_and_refuses_anything_else() -> None:
    value = frame(513, b"body")
    assert value[:5] == b"\x00\x00\x00\x02\x01"
    sid, body = unframe(value)
    assert sid == 513 and bytes(body) == b"body" and wire_schema_id(value) == 513
    for bad in (b"", b"\x00\x00", b"\x01\x00\x00\x00\x01x", b'{"x": 1}', None):
        assert wire_schema_id(bad) is None
        with pytest.raises(NotWireFormat):
            unframe(bad)
