"""How many rows and bytes an Arrow IPC stream holds once decompressed, read from its metadata
alone (``read_meta``: one walk; ``budget.admit`` checks a message's limits from it).

A compressed (LZ4/ZSTD) record batch of a few kilobytes can decompress to gigabytes. Each
record batch message's flatbuffer metadata lists its body buffers (offset, length); in a
compressed body every buffer starts with its uncompressed length (int64, -1 when stored
uncompressed). Summing those before ``read_all`` lets the scorer refuse a bomb without
allocating it. Only the few flatbuffer fields needed are read, by hand (no flatbuffers runtime).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from headrace.core.errors import ValidationFailed

DEFAULT_MAX_ARROW_BYTES = 256 * 1024 * 1024

_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3  # flatbuffer MessageHeader union tags
_CONTINUATION = 0xFFFFFFFF
_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from
_buffer = struct.Struct("<qq").unpack_from


def _field(buf: bytes, table: int, index: int) -> int | None:
    """Absolute position of field ``index`` of the table at ``table``, or None when absent."""
    vtable = table - _i32(buf, table)[0]
    vsize = _u16(buf, vtable)[0]
    slot = 4 + 2 * index
    if slot + 2 > vsize:
        return None
    off = _u16(buf, vtable + slot)[0]
    return table + off if off else None


def _deref(buf: bytes, pos: int) -> int:
    return pos + _u32(buf, pos)[0]


def _batches(value: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(kind, RecordBatch table position, body start, body length) of each record or
    dictionary batch message,
    walking the stream's framing (continuation, metadata size, flatbuffer, body)."""
    pos, end = 0, len(value)
    while pos + 4 <= end:
        size = _u32(value, pos)[0]
        if size == _CONTINUATION:
            pos += 4
            size = _u32(value, pos)[0]
        pos += 4
        if size == 0:
            return  # end of stream
        meta, pos = pos, pos + size
        if pos > end:
            raise ValidationFailed("truncated Arrow IPC message", stage="decode")
        root = _deref(value, meta)
        blen = _field(value, root, 3)
        body_len = 0 if blen is None else _i64(value, blen)[0]
        htype, header = _field(value, root, 1), _field(value, root, 2)
        body, pos = pos, pos + body_len
        if body_len < 0 or pos > end:
            raise ValidationFailed("truncated Arrow IPC message body", stage="decode")
        if htype is None or header is None:
            continue
        kind = _u8(value, htype)[0]
        table = _deref(value, header)
        if kind == _DICTIONARY_BATCH:
            data = _field(value, table, 1)
            if data is None:
                continue
            table = _deref(value, data)
        elif kind != _RECORD_BATCH:
            continue
        yield kind, table, body, body_len


def _batch_bytes(value: bytes, batch: int, body: int, body_len: int) -> int:
    """Decompressed size of one RecordBatch's body (buffers: struct {offset, length})."""
    compressed = _field(value, batch, 3) is not None
    pos = _field(value, batch, 2)
    if pos is None or not compressed:
        return body_len  # uncompressed: the body is all there is
    vec = _deref(value, pos)
    n = _u32(value, vec)[0]
    total = 0
    for k in range(n):
        offset, length = _buffer(value, vec + 4 + 16 * k)
        if length < 8:
            total += max(0, length)
            continue
        at = body + offset
        if offset < 0 or at + 8 > len(value):
            raise ValidationFailed("Arrow IPC buffer lies outside its message body",
                                   stage="decode")
        size = _i64(value, at)[0]
        total += length - 8 if size == -1 else size
    return total


@dataclass(frozen=True)
class ArrowMeta:
    """What an Arrow IPC stream's metadata says: its rows and its bytes once decompressed."""

    rows: int
    stored_bytes: int


def read_meta(value: bytes) -> ArrowMeta:
    """One walk over the stream's metadata (nothing is decompressed); ``ValidationFailed``
    when it is not a readable Arrow IPC stream. Uncompressed streams hold their bytes already:
    only their framing is walked."""
    rows = stored = 0
    try:
        for kind, table, body, body_len in _batches(value):
            stored += _batch_bytes(value, table, body, body_len)
            if kind == _RECORD_BATCH:
                length = _field(value, table, 0)
                rows += 0 if length is None else _i64(value, length)[0]
    except (struct.error, IndexError) as exc:
        raise ValidationFailed(f"undecodable Arrow IPC: {exc}", stage="decode") from None
    return ArrowMeta(rows, stored)
