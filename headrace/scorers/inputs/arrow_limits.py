"""How many bytes an Arrow IPC stream holds once decompressed, read from its metadata alone.

A compressed (LZ4/ZSTD) record batch of a few kilobytes can decompress to gigabytes. Each
record batch message's flatbuffer metadata lists its body buffers (offset, length); in a
compressed body every buffer starts with its uncompressed length (int64, -1 when stored
uncompressed). Summing those before ``read_all`` lets the scorer refuse a bomb without
allocating it. Only the few flatbuffer fields needed are read, by hand (no flatbuffers runtime).
"""

from __future__ import annotations

import struct

import pyarrow as pa

from headrace.core.errors import ValidationFailed

DEFAULT_MAX_ARROW_BYTES = 256 * 1024 * 1024

_RECORD_BATCH, _DICTIONARY_BATCH = 3, 4
_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i64 = struct.Struct("<q").unpack_from


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


def _batch_bytes(meta: bytes, batch: int, body: pa.Buffer) -> int:
    """Decompressed size of one RecordBatch table's body."""
    pos = _field(meta, batch, 2)  # buffers: [struct Buffer {offset: long; length: long}]
    if pos is None:
        return 0
    vec = _deref(meta, pos)
    n = _u32(meta, vec)[0]
    compressed = _field(meta, batch, 3) is not None
    head = memoryview(body)
    total = 0
    for k in range(n):
        offset, length = struct.unpack_from("<qq", meta, vec + 4 + 16 * k)
        if not compressed or length < 8:
            total += max(0, length)
            continue
        if offset < 0 or offset + 8 > len(head):
            raise ValidationFailed("Arrow IPC buffer lies outside its message body",
                                   stage="decode")
        size = _i64(head, offset)[0]
        total += length - 8 if size == -1 else size
    return total


def decompressed_bytes(value: bytes) -> int:
    """Bytes the stream's record and dictionary batches take once decompressed."""
    reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(value))
    total = 0
    while True:
        try:
            msg = reader.read_next_message()
        except StopIteration:
            return total
        if msg.type not in ("record batch", "dictionary batch"):
            continue
        meta = msg.metadata.to_pybytes()
        root = _deref(meta, 0)
        htype = _field(meta, root, 1)
        header = _field(meta, root, 2)
        if htype is None or header is None:
            continue
        table = _deref(meta, header)
        if _u8(meta, htype)[0] == _DICTIONARY_BATCH:
            data = _field(meta, table, 1)
            if data is None:
                continue
            table = _deref(meta, data)
        total += _batch_bytes(meta, table, msg.body)


def check_size(value: bytes, limit: int) -> None:
    """Refuse (``ValidationFailed``) a stream that would decompress to more than ``limit``."""
    try:
        size = decompressed_bytes(value)
    except (pa.ArrowInvalid, pa.ArrowException, OSError, struct.error, IndexError) as exc:
        raise ValidationFailed(f"undecodable Arrow IPC: {exc}", stage="decode") from None
    if size > limit:
        raise ValidationFailed(f"Arrow payload decompresses to {size} bytes, over the limit "
                               f"of {limit}", stage="decode")
