"""The scorer's memory budget: what one message (and one batch) costs once decoded, and the caps.

An Arrow IPC message's compressed size says nothing about its memory: 4.5 KB of zstd holds
32 bool columns x 4 M rows. Its decompressed buffers (``arrow_limits``) are only part of the
bill, because bools are bits on the wire: the decoders widen each feature to at least a byte a
row, cast it to the model's input dtype (float32 or float64), and build the model's inputs. The
cost is computed from the metadata alone (row counts, buffer sizes, the schema's types), before
anything is decompressed:

    decoded bytes = decompressed buffers + rows x (sum over columns of what a column takes per
                    row once widened and cast, plus the model's input bytes per row)
                    + 1/8 of the rows' part for the allocator (Arrow's mimalloc, pyarrow 23+,
                    holds that much over what it hands out)

A message over ``max_message_rows`` or ``max_message_bytes`` is dead-lettered before it is read;
the batcher closes a batch early once its messages' decoded bytes reach the batch budget.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc as ipc

from headrace.core.errors import ValidationFailed
from headrace.scorers.wire.arrow_limits import ArrowMeta, read_meta

DEFAULT_MAX_MESSAGE_ROWS = 1 << 20
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
FLOAT64 = 8  # the decoders' working dtype for columns they cast (bools, decimals, half floats)
FLOAT32 = 4  # a tabular model's input dtype
ALLOCATOR_SHARE = 8  # 1/8 more for what the allocator holds beyond what it hands out


@dataclass(frozen=True)
class MessageCaps:
    """The most one message may hold: rows, and bytes once decoded (see the module doc)."""

    max_rows: int = DEFAULT_MAX_MESSAGE_ROWS
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


@dataclass(frozen=True)
class Cost:
    rows: int
    decoded_bytes: int


def column_bytes(t: pa.DataType) -> int:
    """Bytes one row of a column takes in memory once read and widened, before the model's
    dtype: a bool is a bit on the wire but at least a byte (and a float64) once decoded."""
    if pa.types.is_boolean(t):
        return 1 + FLOAT64
    if pa.types.is_decimal(t) or (pa.types.is_floating(t) and t.bit_width < 32):
        return t.bit_width // 8 + FLOAT64
    if pa.types.is_dictionary(t):
        return column_bytes(t.index_type)
    try:
        return max(1, t.bit_width // 8)  # fixed width; variable width: its data is counted
    except ValueError:  # as decompressed buffers, its offsets here
        return 8


def arrow_cost(value: bytes, input_row_bytes: int = 0, meta: ArrowMeta | None = None) -> Cost:
    """The decoded cost of an Arrow IPC message from its metadata (nothing is decompressed;
    ``meta``: already read); ``input_row_bytes``: what the model's inputs take per row
    (default: float32 per column). ``ValidationFailed`` when it is not a readable Arrow IPC
    stream."""
    meta = meta or read_meta(value)
    try:
        columns, width = _schema_bytes(_schema_message(value), value)
    except (struct.error, IndexError, pa.ArrowException, OSError) as exc:
        raise ValidationFailed(f"undecodable Arrow IPC: {exc}", stage="decode") from None
    decoded = meta.rows * (columns + (input_row_bytes or FLOAT32 * width))
    return Cost(meta.rows, meta.stored_bytes + decoded + decoded // ALLOCATOR_SHARE)


def _schema_message(value: bytes) -> bytes:
    """The stream's first message's flatbuffer (its schema): the cache key of its columns."""
    pos = 4 if value[:4] == b"\xff\xff\xff\xff" else 0
    size = struct.unpack_from("<I", value, pos)[0]
    return value[pos + 4:pos + 4 + size]


_COLUMNS: dict[bytes, tuple[int, int]] = {}
_MAX_SCHEMAS = 256


def _schema_bytes(key: bytes, value: bytes) -> tuple[int, int]:
    """(sum of ``column_bytes`` over the schema, number of columns), cached by the schema's
    bytes: a producer sends one schema, and reading it costs ~100x parsing the batch sizes."""
    got = _COLUMNS.get(key)
    if got is None:
        schema = ipc.open_stream(pa.py_buffer(value)).schema
        got = (sum(column_bytes(f.type) for f in schema), len(schema))
        if len(_COLUMNS) >= _MAX_SCHEMAS:
            _COLUMNS.clear()
        _COLUMNS[key] = got
    return got


def admit(value: bytes, *, caps: MessageCaps, max_arrow_bytes: int,
          input_row_bytes: int = 0) -> Cost:
    """The one admission of an Arrow message before it is read, from one walk over its
    metadata: refuse (``ValidationFailed``, stage decode) a stream that would decompress to
    more than ``max_arrow_bytes`` (a bomb), or a message over a cap; its cost otherwise."""
    meta = read_meta(value)
    if meta.stored_bytes > max_arrow_bytes:
        raise ValidationFailed(f"Arrow payload decompresses to {meta.stored_bytes} bytes, over "
                               f"the limit of {max_arrow_bytes}", stage="decode")
    cost = arrow_cost(value, input_row_bytes, meta)
    if cost.decoded_bytes > caps.max_bytes:
        raise ValidationFailed(
            f"Arrow message of {len(value)} bytes decodes to about {cost.decoded_bytes} bytes "
            f"({cost.rows} rows), over the per-message limit of {caps.max_bytes}",
            stage="decode")
    if cost.rows > caps.max_rows:
        raise ValidationFailed(f"Arrow message holds {cost.rows} rows, over the per-message "
                               f"limit of {caps.max_rows}", stage="decode")
    return cost


def message_measure(value: bytes, is_arrow: bool, input_row_bytes: int = 0) -> tuple[int, int]:
    """(rows, decoded bytes) a message adds to a batch: an Arrow message's from one walk over
    its metadata (an unreadable one is one row costing its length: it is dead-lettered
    unread); anything else one row costing its payload length."""
    if not is_arrow:
        return 1, len(value)
    try:
        cost = arrow_cost(value, input_row_bytes)
    except ValidationFailed:
        return 1, len(value)
    return cost.rows, max(len(value), cost.decoded_bytes)
