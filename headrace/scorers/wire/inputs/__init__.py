"""Decode a consumed batch into a model's inputs (its signature), columnar, per input kind.

A message is one of three things:

* Arrow IPC (starts with 0xFFFFFFFF): many rows; a column per input (numeric columns, a
  fixed-size list or fixed-shape tensor, binary encoded images, strings). Its decompressed size
  is read from its metadata and checked against the limit before anything is read.
* a raw image: content-type ``image/jpeg`` or ``image/png``, for a model with one image input
  (the payload is that image; its key identifies it). Only payloads that are not JSON-looking
  have their headers read (headers cost ~2.5 µs a message).
* one JSON object: numbers by name, nested arrays for tensors, base64 strings for images,
  strings for text and categories.
* with a Schema Registry (``InputLimits.registry``), a record in its wire format (starts with
  byte 0): decoded a schema id at a time into columns by field path (``registry_records``).

The result is a ``Decoded`` value keyed by the signature: any loaded model whose signature is
equal can score it (two models can share one decoded batch). Bad rows become ``BadInput``s
whose reasons name the input; the rest of the batch is scored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from headrace import codecs
from headrace.codecs.columns import Getter, Limits, Reasons
from headrace.core.errors import ValidationFailed
from headrace.core.limits import MAX_RECORD_BYTES
from headrace.scorers.wire.arrow_limits import DEFAULT_MAX_ARROW_BYTES
from headrace.scorers.wire.budget import MessageCaps, admit
from headrace.scorers.wire.decoding import BadInput, is_arrow_mask, with_schema_id
from headrace.scorers.wire.inputs import json_columns
from headrace.scorers.wire.registry_records import (
    RegistryRecords,
    SchemaRecordFailed,
    WireRecords,
    not_configured,
    wrong_magic,
)
from headrace.store.signature import ModelInput
from headrace.streams import headers as hdr
from headrace.streams.codecs import decode_arrow
from headrace.streams.consuming import RawBatch

Signature = tuple[ModelInput, ...]
IMAGE_TYPES = ("image/jpeg", "image/png")
_JSONISH = frozenset(b"{[\" \t\r\n")

__all__ = ["Decoded", "InputLimits", "Signature", "decode_inputs"]


@dataclass(frozen=True)
class InputLimits(Limits):
    max_arrow_bytes: int = DEFAULT_MAX_ARROW_BYTES
    message: MessageCaps = field(default_factory=MessageCaps)
    # Reads records in the Schema Registry wire format; None: no registry (they are refused).
    registry: RegistryRecords | None = None


@dataclass
class Decoded:
    """Rows to score: ``arrays[name][i]`` came from message ``message[i]``, row ``row[i]``."""

    signature: Signature
    arrays: dict[str, np.ndarray]
    message: np.ndarray  # int64
    row: np.ndarray  # int32
    is_arrow: np.ndarray  # bool, one per message
    arrow_tables: dict[int, pa.Table] = field(default_factory=dict)
    bad: list[BadInput] = field(default_factory=list)
    # Images converted to the model's channels, by conversion ("L->RGB"): counted and logged.
    conversions: Counter[str] = field(default_factory=Counter)

    @property
    def num_rows(self) -> int:
        return len(self.message)

    def take(self, keep: np.ndarray) -> Decoded:
        return Decoded(self.signature, {k: v[keep] for k, v in self.arrays.items()},
                       self.message[keep], self.row[keep], self.is_arrow, self.arrow_tables,
                       self.bad, self.conversions)


def single_raw(signature: Signature) -> ModelInput | None:
    """The one input a raw (non-JSON, non-Arrow) message can be, if the signature has one."""
    if len(signature) == 1 and codecs.codec(signature[0].kind).raw_types:
        return signature[0]
    return None


def decode_inputs(batch: RawBatch, signature: Signature,
                  limits: InputLimits | None = None) -> Decoded:
    limits = limits or InputLimits()
    arrow = is_arrow_mask(batch)
    bad: list[BadInput] = []
    parts: list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]] = []
    tables: dict[int, pa.Table] = {}
    conversions: Counter[str] = Counter()

    registry = limits.registry
    wire = None if registry is None else registry.wire_mask(batch.values) & ~arrow
    has_wire = wire is not None and bool(wire.any())
    json_msgs = np.flatnonzero(~arrow & ~wire if has_wire and wire is not None else ~arrow)
    columnar = json_columns.read(batch.values if len(json_msgs) == len(batch) else
                                 [batch.values[i] for i in json_msgs.tolist()], signature)
    if columnar is not None:
        arrays, reasons = _columns_group(columnar, len(json_msgs), signature, limits,
                                         conversions)
        parts.append(_keep(arrays, reasons, json_msgs.astype(np.int64),
                           np.zeros(len(json_msgs), np.int32), bad, False))
    else:
        records: list[dict[str, Any]] = []
        rec_msgs: list[int] = []
        raw = single_raw(signature)
        for i in json_msgs.tolist():
            value = batch.values[i]
            rec = _record(batch, i, value, raw, bad, registry)
            if rec is not None:
                records.append(rec)
                rec_msgs.append(i)
        if records:
            parts.append(_json_part(records, rec_msgs, signature, limits, conversions, bad))

    if has_wire and registry is not None and wire is not None:
        wanted = [f for inp in signature for f in codecs.codec(inp.kind).fields(inp)]
        parts += _wire_parts(registry.decode(batch.values, np.flatnonzero(wire), wanted),
                             signature, limits, conversions, bad)

    for i in np.flatnonzero(arrow).tolist():
        try:
            admit(batch.values[i], caps=limits.message, max_arrow_bytes=limits.max_arrow_bytes,
                  input_row_bytes=signature_bytes(signature))  # a bomb is refused before reading
            table = decode_arrow(batch.values[i])
            _check_table(table)
        except ValidationFailed as exc:
            bad.append(BadInput(i, None, exc, exc.stage or "decode"))
            continue
        tables[i] = table
        n = table.num_rows
        names = set(table.column_names)

        def get(name: str, t: pa.Table = table, names: set[str] = names) -> pa.Array | None:
            return t.column(name) if name in names else None

        arrays, reasons = _group(get, n, signature, limits, conversions)
        parts.append(_keep(arrays, reasons, np.full(n, i, np.int64),
                           np.arange(n, dtype=np.int32), bad, True))

    if len(parts) == 1:
        arrays, msg, row = parts[0]
    elif parts:
        arrays = {inp.name: np.concatenate([p[0][inp.name] for p in parts])
                  for inp in signature}
        msg = np.concatenate([p[1] for p in parts])
        row = np.concatenate([p[2] for p in parts])
    else:
        arrays = {inp.name: codecs.codec(inp.kind).empty(inp, 0) for inp in signature}
        msg, row = np.zeros(0, np.int64), np.zeros(0, np.int32)
    # Back in message order, so predictions follow their inputs.
    order = np.lexsort((row, msg))
    if len(order) and not (order[1:] > order[:-1]).all():
        arrays = {k: v[order] for k, v in arrays.items()}
        msg, row = msg[order], row[order]
    if has_wire:
        bad = [with_schema_id(b, batch) for b in bad]
    return Decoded(signature, arrays, msg, row, arrow, tables, bad, conversions)


def _wire_parts(wired: WireRecords, signature: Signature, limits: Limits,
                conversions: Counter[str], bad: list[BadInput]
                ) -> list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]]:
    """Each schema id's group of wire records as the model's inputs (JSON Schema bodies as
    JSON records); the bad records added to ``bad``."""
    bad += [BadInput(i, None, exc, exc.stage or "decode") for i, exc in wired.bad]
    parts = []
    for g in wired.groups:
        n = len(g.messages)
        if g.json is not None:
            records: list[dict[str, Any]] = []
            rec_msgs: list[int] = []
            for i, body in zip(g.messages.tolist(), g.json, strict=True):
                rec = _json_body(i, body, g.schema_id, bad)
                if rec is not None:
                    records.append(rec)
                    rec_msgs.append(i)
            if records:
                parts.append(_json_part(records, rec_msgs, signature, limits, conversions,
                                        bad))
            continue
        bad += [BadInput(int(g.messages[r]), None, exc, exc.stage or "decode")
                for r, exc in g.bad.items()]
        cols = g.columns
        arrays, reasons = _group(cols.get, n, signature, limits, conversions)
        for r in g.bad:
            reasons.pop(r, None)
        keep = np.ones(n, bool)
        keep[list(g.bad)] = False
        arrays = {k: v[keep] for k, v in arrays.items()}
        rows = np.flatnonzero(keep)
        reasons = {int(np.searchsorted(rows, r)): w for r, w in reasons.items() if keep[r]}
        parts.append(_keep(arrays, reasons, g.messages[keep], np.zeros(len(rows), np.int32),
                           bad, False))
    return parts


def _json_body(i: int, body: bytes, schema_id: int, bad: list[BadInput]
               ) -> dict[str, Any] | None:
    """A JSON Schema record's body as a JSON object, or None (its reason added to ``bad``)."""
    why = None
    try:
        rec = msgspec.json.decode(body)
        if not isinstance(rec, dict):
            why = "JSON record is not an object"
    except (msgspec.DecodeError, RecursionError) as exc:
        why = f"undecodable JSON record: {exc}"
    if why is None:
        return rec
    bad.append(BadInput(i, None, SchemaRecordFailed(f"schema id {schema_id}: {why}",
                                                    schema_id=schema_id), "decode"))
    return None


def _json_part(records: list[dict[str, Any]], rec_msgs: list[int], signature: Signature,
               limits: Limits, conversions: Counter[str], bad: list[BadInput]
               ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """JSON records (one a message: plain JSON, or a JSON Schema wire record's body) as one
    part of the batch, their bad rows dead-lettered."""
    arrays, reasons = _records_group(records, signature, limits, conversions)
    msgs = np.asarray(rec_msgs, np.int64)
    return _keep(arrays, reasons, msgs, np.zeros(len(msgs), np.int32), bad, False)


def _keep(arrays: dict[str, np.ndarray], reasons: Reasons, msgs: np.ndarray, rows: np.ndarray,
          bad: list[BadInput], is_arrow: bool
          ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    if not reasons:
        return arrays, msgs, rows
    for r, why in sorted(reasons.items()):
        bad.append(BadInput(int(msgs[r]), int(rows[r]) if is_arrow else None,
                            ValidationFailed(why, stage="validate"), "validate"))
    keep = np.ones(len(msgs), bool)
    keep[list(reasons)] = False
    return {k: v[keep] for k, v in arrays.items()}, msgs[keep], rows[keep]


def _group(get: Getter, n: int, signature: Signature, limits: Limits,
           conversions: Counter[str]) -> tuple[dict[str, np.ndarray], Reasons]:
    arrays: dict[str, np.ndarray] = {}
    reasons: Reasons = {}
    for inp in signature:
        arrays[inp.name], why = codecs.codec(inp.kind).build(inp, get, n, limits, conversions)
        for r, w in why.items():
            reasons.setdefault(r, w)
    return arrays, reasons


def _check_table(table: pa.Table) -> None:
    if table.num_rows == 0:
        raise ValidationFailed("Arrow payload holds no rows", stage="decode")
    names = table.column_names
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValidationFailed(f"Arrow batch repeats column(s) {dup[:5]}", stage="validate")


# -- JSON and raw messages ---------------------------------------------------------------
def _record(batch: RawBatch, i: int, value: bytes, raw: ModelInput | None,
            bad: list[BadInput], registry: RegistryRecords | None = None
            ) -> dict[str, Any] | None:
    def refuse(why: str, stage: str = "decode") -> None:
        bad.append(BadInput(i, None, ValidationFailed(why, stage=stage), stage))

    if not value:
        refuse("empty payload")
        return None
    if len(value) > MAX_RECORD_BYTES:
        refuse(f"payload of {len(value)} bytes exceeds the limit")
        return None
    if value[0] not in _JSONISH:
        ctype = (hdr.get(batch.headers_of(i), hdr.CONTENT_TYPE) or "").split(";")[0].strip()
        if ctype in IMAGE_TYPES:
            if raw is None or ctype not in codecs.codec(raw.kind).raw_types:
                refuse(f"a raw {ctype} message, but the model takes more than one image input "
                       f"or none", "validate")
                return None
            return {raw.name: value}
        if ctype == hdr.ARROW:
            refuse("content-type says Arrow IPC but the payload is not an Arrow IPC stream "
                   "(no 0xFFFFFFFF continuation marker)")
            return None
        other = not_configured(value) if registry is None else wrong_magic(value)
        if other is not None:
            refuse(other)
            return None
    try:
        rec = msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        refuse(f"undecodable JSON record: {exc}")
        return None
    except RecursionError:  # msgspec recurses per level: [ x 100,000 must not kill us
        refuse("undecodable JSON record: nested too deep")
        return None
    if not isinstance(rec, dict):
        refuse("JSON record is not an object", "validate")
        return None
    return rec


def _records_group(records: list[dict[str, Any]], signature: Signature, limits: Limits,
                   conversions: Counter[str]) -> tuple[dict[str, np.ndarray], Reasons]:
    """JSON records to one Arrow array per field the signature names, then the common path."""
    n = len(records)
    pre: Reasons = {}
    cols: dict[str, pa.Array] = {}
    for inp in signature:
        c = codecs.codec(inp.kind)
        for f in c.fields(inp):
            values = [r.get(f) for r in records]
            for k, v in enumerate(values):
                if v is None and (not c.multi_field or f not in records[k]):
                    pre.setdefault(k, f"input {inp.name!r}: field {f!r} is missing"
                                   if c.multi_field else f"input {inp.name!r} is missing")
            cols[f] = c.from_json(values, inp, f, pre)
    arrays, reasons = _group(cols.get, n, signature, limits, conversions)
    for r, w in reasons.items():
        pre.setdefault(r, w)
    return arrays, pre


def _columns_group(table: pa.Table, n: int, signature: Signature, limits: Limits,
                   conversions: Counter[str]) -> tuple[dict[str, np.ndarray], Reasons]:
    """JSON records parsed as one Arrow table (``json_columns``); a kind that asks for it
    (images: base64 text to bytes) reads its values as the per-record path does."""
    pre: Reasons = {}
    cols: dict[str, pa.Array] = {}
    names = set(table.column_names)
    for inp in signature:
        c = codecs.codec(inp.kind)
        for f in c.fields(inp):
            if f in names:
                col = table.column(f).combine_chunks()
                cols[f] = c.from_json(col.to_pylist(), inp, f, pre) if c.reparse else col
    arrays, reasons = _group(cols.get, n, signature, limits, conversions)
    for r, w in reasons.items():
        pre.setdefault(r, w)
    return arrays, pre


def signature_bytes(signature: Sequence[ModelInput]) -> int:
    """Bytes one row's inputs take once decoded (strings: counted as 256)."""
    return sum(codecs.codec(inp.kind).bytes_per_row(inp) for inp in signature)
