"""Protobuf bodies of one writer schema to Arrow columns.

The registry gives a schema as ``.proto`` text (or, asked for ``format=serialized``, a
base64 ``FileDescriptorProto``); ``proto_text`` turns the text into a descriptor and the
``protobuf`` runtime builds a message class from it in a pool of its own (two versions of one
message never meet). A message of scalar fields (numbers, booleans, enums, strings) is read by
``protobuf_flat`` a tag at a time over the whole batch, no object per record; any other is
parsed by the runtime (C, upb) record by record and the fields the model reads are taken from
the messages with C-level maps.

A body starts with the Confluent message indexes (which message of the file: a zigzag varint
count, then that many indexes; a lone 0 means the first message). Columns are named by path
(``parent.child``); enums are their names; a field without presence (proto3 scalars) reads as
its default when absent, as Protobuf defines; one with presence (``optional``, messages) reads
as null.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.scorers.wire import protobuf_flat

# FieldDescriptor.TYPE_* of the numbers read straight into numpy
_NUMPY = {1: np.float64, 2: np.float32, 3: np.int64, 4: np.uint64, 5: np.int32, 6: np.uint64,
          7: np.uint32, 13: np.uint32, 15: np.int32, 16: np.int64, 17: np.int32, 18: np.int64}
_WELL_KNOWN = ("timestamp", "duration", "wrappers", "struct", "any", "empty", "field_mask")


class SchemaUnusable(ValueError):
    """The schema cannot be read as Protobuf."""


@dataclass(frozen=True)
class ProtobufColumns:
    fields: tuple[str, ...]
    _file: Any  # FileDescriptor
    _classes: dict[tuple[int, ...], Any]  # message class by Confluent message-index path
    _flat: protobuf_flat.FlatPlan | None = None  # the first message, all scalar fields

    @property
    def vectorised(self) -> bool:
        return self._flat is not None

    def columns(self, values: Sequence[bytes], wanted: Iterable[str], skip: int = 0
                ) -> tuple[dict[str, pa.Array], dict[int, str]]:
        """The ``wanted`` fields, one row per value (its body from byte ``skip`` on)."""
        have = set(self.fields)
        want = [f for f in dict.fromkeys(wanted) if f in have]
        if self._flat is not None and _all_first(values, skip):
            got = protobuf_flat.read(self._flat, values, skip + 1, want)
            if got is not None:
                return got, {}
        msgs, errors = self._parse(values, skip)
        good = [m for m in msgs if m is not None]
        rows = np.fromiter((m is not None for m in msgs), bool, len(msgs))
        cols: dict[str, pa.Array] = {}
        first = self._classes[(0,)].DESCRIPTOR
        for f in want:
            arr = _column(first, f, good)
            cols[f] = arr if rows.all() else _spread(arr, rows)
        return cols, errors

    def _parse(self, values: Sequence[bytes], skip: int) -> tuple[list[Any], dict[int, str]]:
        first = self._classes[(0,)].FromString
        msgs: list[Any] = []
        errors: dict[int, str] = {}
        zero = skip + 1
        for i, value in enumerate(values):
            try:
                if value[skip:zero] == b"\x00":  # the first message: the common case
                    msgs.append(first(value[zero:]))
                    continue
                body = value[skip:]
                path, start = _indexes(body)
                cls = self._classes.get(path)
                if cls is None:
                    raise ValueError(f"message index {list(path)} is not in the schema")
                msgs.append(cls.FromString(body[start:]))
            except Exception as exc:  # DecodeError, IndexError: a body that does not parse
                errors[i] = f"body does not decode as its Protobuf schema says: {exc}"[:500]
                msgs.append(None)
        if any(m is not None and m.DESCRIPTOR is not self._classes[(0,)].DESCRIPTOR
               for m in msgs):
            for i, m in enumerate(msgs):  # fields are read from the first message only
                if m is not None and m.DESCRIPTOR is not self._classes[(0,)].DESCRIPTOR:
                    errors[i] = (f"message {m.DESCRIPTOR.full_name} is not the schema's "
                                 f"first message, the one the scorer reads")
                    msgs[i] = None
        return msgs, errors


def _column(desc: Any, path: str, msgs: list[Any]) -> pa.Array:
    """One field of every message, a C-level map per step (``attrgetter``, ``HasField``)."""
    parts = path.split(".")
    n = len(msgs)
    present = np.ones(n, bool)
    for k, p in enumerate(parts):
        fd = desc.fields_by_name[p]
        if fd.has_presence and not _repeated(fd):
            parent = msgs if k == 0 else list(map(attrgetter(".".join(parts[:k])), msgs))
            present &= np.fromiter(map(methodcaller("HasField", p), parent), bool, n)
        if k < len(parts) - 1:
            desc = fd.message_type
    if fd.message_type is not None:
        return pa.nulls(n)  # a message is read by its fields' paths
    mask = None if present.all() else ~present
    number = _NUMPY.get(fd.type)
    if number is not None and not _repeated(fd):  # straight into numpy, no list
        return pa.array(np.fromiter(map(attrgetter(path), msgs), number, n), mask=mask)
    values = list(map(attrgetter(path), msgs))
    if _repeated(fd):
        values = list(map(list, values))
        if fd.enum_type is not None:
            names = {v.number: v.name for v in fd.enum_type.values}
            values = [[names.get(x, str(x)) for x in v] for v in values]
        return pa.array(values, mask=mask)
    if fd.enum_type is not None:
        numbers = pa.array(values, pa.int64())
        by_number = {v.number: v.name for v in fd.enum_type.values}
        keys = pa.array(sorted(by_number), pa.int64())
        names = pa.array([by_number[k] for k in keys.to_pylist()], pa.string())
        idx = pc.index_in(numbers, value_set=keys)
        out = names.take(idx)  # an unknown number (a newer writer) is null
        return out if mask is None else pc.if_else(pa.array(present), out, None)
    return pa.array(values, mask=mask)


def _spread(arr: pa.Array, rows: np.ndarray) -> pa.Array:
    """``arr`` (one value per True in ``rows``) at its rows, null elsewhere."""
    at = np.full(len(rows), -1, np.int64)
    at[rows] = np.arange(int(rows.sum()))
    return arr.take(pa.array(at, mask=at < 0))


def _all_first(values: Sequence[bytes], skip: int) -> bool:
    """Whether every value's message indexes are the lone 0 (the schema's first message)."""
    zero = skip + 1
    return all(v[skip:zero] == b"\x00" for v in values)


def _indexes(body: bytes) -> tuple[tuple[int, ...], int]:
    """The message-index path at the start of ``body`` and where the message starts."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = acc = 0
        while True:
            b = body[pos]
            pos += 1
            acc |= (b & 0x7F) << shift
            if not b & 0x80:
                return (acc >> 1) ^ -(acc & 1)
            shift += 7
            if shift > 63:
                raise ValueError("message index varint too long")

    count = varint()
    if count == 0:
        return (0,), pos
    if not 0 < count <= 64:
        raise ValueError(f"message index count {count} out of range")
    return tuple(varint() for _ in range(count)), pos


def _repeated(fd: Any) -> bool:
    rep = getattr(fd, "is_repeated", None)
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED


def compile_schema(schema_str: str) -> ProtobufColumns:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from headrace.scorers.wire import proto_text

    proto = _serialized(schema_str)
    if proto is None:
        try:
            proto = proto_text.parse(schema_str)
        except proto_text.ProtoSyntaxError as exc:
            raise SchemaUnusable(f"not a Protobuf schema: {exc}") from None
    pool = descriptor_pool.DescriptorPool()
    for dep in proto.dependency:
        known = _well_known(dep)
        if known is None:
            raise SchemaUnusable(f"imports {dep!r}: schema references are not supported")
        fdp = descriptor_pb2.FileDescriptorProto()
        known.CopyToProto(fdp)
        pool.Add(fdp)
    try:
        pool.Add(proto)
        file = pool.FindFileByName(proto.name)
    except Exception as exc:  # TypeError / KeyError from the runtime: names that don't resolve
        raise SchemaUnusable(f"Protobuf schema does not build: {exc}") from None
    if not file.message_types_by_name:
        raise SchemaUnusable("the Protobuf schema declares no message")
    classes: dict[tuple[int, ...], Any] = {}
    fields: list[str] = []

    def walk(descs: Iterable[Any], path: tuple[int, ...]) -> None:
        for k, d in enumerate(descs):
            if d.GetOptions().map_entry:
                continue
            classes[(*path, k)] = message_factory.GetMessageClass(d)
            walk(d.nested_types, (*path, k))

    walk(file.message_types_by_name.values(), ())
    first = next(iter(file.message_types_by_name.values()))
    fields += _paths(first, "", set())
    return ProtobufColumns(tuple(fields), file, classes, protobuf_flat.plan(first))


def _paths(desc: Any, prefix: str, seen: set[str]) -> list[str]:
    """Field paths: scalars, enums and repeated scalars; a message's fields as ``a.b``."""
    out = []
    for fd in desc.fields:
        path = prefix + fd.name
        mt = fd.message_type
        if mt is None:
            out.append(path)
        elif not _repeated(fd) and mt.full_name not in seen:
            out += _paths(mt, path + ".", seen | {desc.full_name})
    return out


def _serialized(schema_str: str) -> Any:
    """A base64 ``FileDescriptorProto`` (the registry's ``format=serialized``), or None."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    text = schema_str.strip()
    if not text or any(c.isspace() for c in text) or ";" in text:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    if not proto.name:
        proto.name = "schema.proto"
    return proto


def _well_known(name: str) -> Any:
    import importlib

    for w in _WELL_KNOWN:
        if name == f"google/protobuf/{w}.proto":
            return importlib.import_module(f"google.protobuf.{w}_pb2").DESCRIPTOR
    return None
