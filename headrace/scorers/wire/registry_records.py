"""Records in the Confluent wire format: magic byte 0, a 4-byte big-endian schema id, the body.

A batch's wire records are grouped by schema id and each group is decoded at once by its own
writer schema (fetched from the registry once per id, then cached), so a schema that evolves
(a field added with a default, an optional one removed, a nested record added) is read without
a restart: every id is its own writer schema, and fields the model does not read are skipped.
A format is an entry in ``FORMATS`` (Avro, Protobuf, JSON Schema); Avro and Protobuf bodies
become Arrow columns named by field path (``parent.child`` inside nested records); JSON Schema
bodies are JSON records, read as the scorer reads any JSON record.

No JSON text starts with byte 0 (NUL is never valid JSON), nor does an Arrow IPC stream
(0xFFFFFFFF) or a JPEG / PNG image: byte 0 alone says "wire format" once a registry is set.

Failures, each per record, to the dead letters with the schema id (``SchemaRecordFailed``): an
id the registry does not know, a header cut short, a body that does not decode, a schema that
cannot be read or lacks a field the model needs. A registry that cannot be reached (or answers
5xx) raises ``RetriableError`` out of the decode: the scorer holds its partitions and decodes
the batch again once the registry answers.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Protocol

import numpy as np
import pyarrow as pa

from headrace.core.errors import PermanentError, RetriableError, ValidationFailed
from headrace.scorers.wire import avro_columns, protobuf_columns

log = logging.getLogger(__name__)

MAGIC = b"\x00"
HEADER_BYTES = 5
UNKNOWN_RETRY_S = 30.0  # an id the registry did not know is asked again after this long
MAX_SCHEMAS = 10_000
_HEADER = operator.itemgetter(slice(0, HEADER_BYTES))
REGISTRY_STAGE = "registry"  # a RetriableError's stage: waiting for the registry


class Registered(Protocol):
    @property
    def schema_type(self) -> str: ...  # AVRO, PROTOBUF or JSON

    @property
    def schema_str(self) -> str: ...


class SchemaSource(Protocol):
    """The registry client (``streams.schema_registry.SchemaRegistry``): a schema by id.
    Raises ``PermanentError`` for an id the registry does not know and ``RetriableError``
    when it cannot answer now."""

    def fetch_schema(self, schema_id: int) -> Registered: ...


class SchemaRecordFailed(ValidationFailed):
    """A wire-format record that cannot be scored; ``schema_id`` goes into its dead letter."""

    def __init__(self, message: str, *, schema_id: int | None, stage: str = "decode") -> None:
        super().__init__(message, stage=stage)
        self.schema_id = schema_id


class ColumnsDecoder(Protocol):
    """One writer schema compiled: the field paths it has, and a group of bodies as columns
    (one row per body) with the bodies that do not decode."""

    @property
    def fields(self) -> tuple[str, ...]: ...

    def columns(self, values: Sequence[bytes], wanted: Iterable[str], skip: int = 0
                ) -> tuple[dict[str, pa.Array], dict[int, str]]: ...


@dataclass(frozen=True)
class JsonBodies:
    """A JSON Schema: its bodies are JSON records (``fields``: its declared properties, when
    it declares that no others are allowed; empty: any)."""

    fields: tuple[str, ...] = ()
    closed: bool = False


Decoder = ColumnsDecoder | JsonBodies


def _json_schema(schema_str: str) -> JsonBodies:
    import json

    try:
        schema = json.loads(schema_str)
    except ValueError as exc:
        raise avro_columns.SchemaUnusable(f"not a JSON Schema: {exc}") from None
    if not isinstance(schema, dict):
        return JsonBodies()
    props = schema.get("properties")
    closed = isinstance(props, dict) and schema.get("additionalProperties") is False
    return JsonBodies(tuple(props) if closed and isinstance(props, dict) else (), closed)


# The formats, by the registry's schema type (an absent type is Avro, as the registry says).
FORMATS: dict[str, Callable[[str], Decoder]] = {
    "AVRO": avro_columns.compile_schema,
    "PROTOBUF": protobuf_columns.compile_schema,
    "JSON": _json_schema,
}


@dataclass
class Group:
    """The wire records of one schema id in a batch, decoded.

    ``messages``: their indices in the batch, in order. Avro / Protobuf: ``columns`` (a row
    per message; rows in ``bad`` are to be dropped). JSON Schema: ``json`` bodies instead.
    """

    schema_id: int
    messages: np.ndarray
    columns: dict[str, pa.Array] = field(default_factory=dict)
    json: list[bytes] | None = None
    bad: dict[int, SchemaRecordFailed] = field(default_factory=dict)  # by position in group


@dataclass
class WireRecords:
    groups: list[Group]
    bad: list[tuple[int, SchemaRecordFailed]]  # whole messages, by index in the batch


class RegistryRecords:
    """Decodes wire-format records through a registry; one per scorer, shared by its
    threads. Schemas are compiled once per id and kept (an id's schema never changes)."""

    def __init__(self, source: SchemaSource, *, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.source = source
        self._clock = clock
        self._lock = threading.Lock()
        self._decoders: dict[int, Decoder] = {}
        self._refused: dict[int, tuple[float, str]] = {}  # id -> (until, why)

    @staticmethod
    def wire_mask(values: Sequence[bytes]) -> np.ndarray:
        """Which values are in the wire format (start with byte 0): one C call a value."""
        return np.fromiter(map(bytes.startswith, values, repeat(MAGIC)), bool, len(values))

    def decoder(self, schema_id: int) -> Decoder:
        """The compiled schema of ``schema_id``; ``SchemaRecordFailed`` if it cannot be had
        or read, ``RetriableError`` (from the source) if the registry cannot answer now."""
        with self._lock:
            got = self._decoders.get(schema_id)
            refused = self._refused.get(schema_id)
        if got is not None:
            return got
        if refused is not None and refused[0] > self._clock():
            raise SchemaRecordFailed(refused[1], schema_id=schema_id)
        try:
            got_schema = self.source.fetch_schema(schema_id)
            schema_type, schema_str = got_schema.schema_type, got_schema.schema_str
        except (RetriableError, OSError) as exc:  # the worker holds its partitions meanwhile
            raise RetriableError(f"the Schema Registry cannot give schema id {schema_id} now: "
                                 f"{exc}", stage=REGISTRY_STAGE) from exc
        except PermanentError as exc:
            why = f"schema id {schema_id} is unknown to the registry: {exc}"
            self._refuse(schema_id, why, UNKNOWN_RETRY_S)
            raise SchemaRecordFailed(why, schema_id=schema_id) from None
        compile_ = FORMATS.get((schema_type or "AVRO").upper())
        try:
            if compile_ is None:
                raise avro_columns.SchemaUnusable(f"schema type {schema_type!r} is not "
                                                  f"one of {sorted(FORMATS)}")
            got = compile_(schema_str)
        except (avro_columns.SchemaUnusable, protobuf_columns.SchemaUnusable) as exc:
            why = f"schema id {schema_id} cannot be read: {exc}"
            self._refuse(schema_id, why, float("inf"))
            raise SchemaRecordFailed(why, schema_id=schema_id) from None
        with self._lock:
            if len(self._decoders) >= MAX_SCHEMAS:
                self._decoders.clear()
            self._decoders[schema_id] = got
        return got

    def _refuse(self, schema_id: int, why: str, for_s: float) -> None:
        with self._lock:
            if len(self._refused) >= MAX_SCHEMAS:
                self._refused.clear()
            self._refused[schema_id] = (self._clock() + for_s, why)

    def decode(self, values: Sequence[bytes], messages: np.ndarray, wanted: Sequence[str]
               ) -> WireRecords:
        """The wire records ``values[i] for i in messages`` by schema id, each group decoded
        into the ``wanted`` fields (the model's inputs); a group whose schema lacks one of
        them is refused whole."""
        bad: list[tuple[int, SchemaRecordFailed]] = []
        mine = values if len(messages) == len(values) else [values[i]
                                                             for i in messages.tolist()]
        lengths = np.fromiter(map(len, mine), np.int64, len(mine))
        short = lengths < HEADER_BYTES
        if short.any():
            bad += [(int(messages[k]), SchemaRecordFailed(
                f"wire-format record of {int(lengths[k])} bytes: shorter than its 5-byte "
                f"header", schema_id=None)) for k in np.flatnonzero(short).tolist()]
            keep = np.flatnonzero(~short)
            messages, mine = messages[keep], [mine[k] for k in keep.tolist()]
        # Every header at once: bytes 1-4 of each value, big-endian.
        heads = np.frombuffer(b"".join(map(_HEADER, mine)), np.uint8).reshape(-1, HEADER_BYTES)
        ids = heads[:, 1:].copy().view(">u4").reshape(-1)
        groups = []
        for schema_id in np.unique(ids).tolist():
            at = np.flatnonzero(ids == schema_id)
            members = messages[at]
            try:
                dec = self.decoder(schema_id)
                _check_fields(dec, schema_id, wanted)
            except SchemaRecordFailed as exc:
                bad += zip(members.tolist(), repeat(exc))
                continue
            group = Group(schema_id, members.astype(np.int64))
            part = mine if len(at) == len(mine) else [mine[k] for k in at.tolist()]
            if isinstance(dec, JsonBodies):
                group.json = [v[HEADER_BYTES:] for v in part]
            else:
                try:
                    group.columns, errors = dec.columns(part, wanted, HEADER_BYTES)
                except Exception as exc:  # no reader dies on any bytes: the group is refused
                    log.exception("schema id %d: a group of %d records did not decode",
                                  schema_id, len(part))
                    failed = SchemaRecordFailed(f"schema id {schema_id}: the records could "
                                                f"not be decoded: {exc!r}"[:500],
                                                schema_id=schema_id)
                    bad += zip(members.tolist(), repeat(failed))
                    continue
                group.bad = {r: SchemaRecordFailed(f"schema id {schema_id}: {why}",
                                                   schema_id=schema_id)
                             for r, why in errors.items()}
            groups.append(group)
        return WireRecords(groups, bad)


def _check_fields(dec: Decoder, schema_id: int, wanted: Sequence[str]) -> None:
    if isinstance(dec, JsonBodies) and not dec.closed:
        return  # any field may be there: each record says
    have = set(dec.fields)
    missing = [f for f in wanted if f not in have]
    if missing:
        raise SchemaRecordFailed(
            f"schema id {schema_id} has no field(s) {missing[:5]} that the model reads "
            f"(it has {sorted(have)[:20]})", schema_id=schema_id, stage="validate")


def not_configured(value: bytes) -> str | None:
    """The reason for a wire-format record met by a scorer with no registry (None: not one)."""
    if value[:1] == MAGIC:
        return ("a Schema Registry wire-format record (magic byte 0), but the scorer has no "
                "registry (HEADRACE_SCHEMA_REGISTRY_URL)")
    return None


def wrong_magic(value: bytes) -> str:
    """The reason for a record that is no input the scorer knows, with a registry set."""
    first = value[:1].hex() or "none"
    return (f"not JSON, Arrow IPC or a Schema Registry wire-format record: first byte 0x{first}"
            f", the wire format's magic byte is 0x00")
