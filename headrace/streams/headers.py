"""Message headers: content type, schema, and dead-letter / replay annotations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

CONTENT_TYPE = "content-type"
SCHEMA = "schema"
SCHEMA_VERSION = "schema-version"

JSON = "application/json"
ARROW = "application/vnd.apache.arrow.stream"

Headers = list[tuple[str, bytes]]
RawHeaders = Sequence[tuple[str, bytes | str | None]] | dict[str, bytes | str | None] | None


def weight(key: bytes | None, headers: Headers) -> int:
    """What a record's key and headers add to its size (8 a header: its length fields)."""
    return len(key or b"") + sum(len(k.encode()) + len(v) + 8 for k, v in headers)


def to_dict(headers: RawHeaders) -> dict[str, str]:
    """Last value wins; bytes are decoded leniently (headers are for humans and routing)."""
    out: dict[str, str] = {}
    pairs = headers.items() if isinstance(headers, dict) else (headers or ())
    for k, v in pairs:
        if v is None:
            out[k] = ""
        elif isinstance(v, bytes):
            out[k] = v.decode("utf-8", "replace")
        else:
            out[k] = str(v)
    return out


def build(items: Mapping[str, object] | Iterable[tuple[str, object]]) -> Headers:
    pairs = items.items() if isinstance(items, Mapping) else items
    return [(k, str(v).encode()) for k, v in pairs if v is not None]


def contract_headers(schema: str, version: int) -> Headers:
    return build({CONTENT_TYPE: JSON, SCHEMA: schema, SCHEMA_VERSION: version})


def get(headers: RawHeaders, name: str) -> str | None:
    return to_dict(headers).get(name)
