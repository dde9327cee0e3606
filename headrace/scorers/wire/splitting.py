"""Predictions of one Arrow input message split over several output messages when one would be
over the producer's ``message.max.bytes`` (a 4 M-row input makes a prediction message of
~100 MB; the producer refuses it, and producing it again fails the same way).

The rows are cut into contiguous parts, each an Arrow IPC stream of the same schema under the
limit; every part carries headers that tie the parts together:

    prediction.source  "<topic>/<partition>/<offset>" of the input message (also in every row)
    prediction.part    0-based index of this part
    prediction.parts   how many parts there are

A consumer has all of an input's predictions once it holds ``parts`` distinct parts of one
source; each part's rows carry their input ``row`` as always. An unsplit message has none of
these headers. A single row over the limit cannot be split: the producer refuses it and the
input is dead-lettered with the reason (``refusals``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from headrace.streams import headers as hdr
from headrace.streams.codecs import decode_arrow, encode_arrow

SOURCE = "prediction.source"
PART = "prediction.part"
PARTS = "prediction.parts"
# What a record adds around its value (length fields, timestamp deltas, attributes), with
# room to spare: librdkafka refuses a message when value + key + headers + ~40 bytes is over.
RECORD_OVERHEAD = 512


@dataclass(frozen=True)
class Part:
    """One output message with its own headers (a split prediction's part)."""

    value: bytes
    key: bytes | None
    headers: list[tuple[str, bytes]]


def value_limit(max_message_bytes: int, key: bytes | None,
                headers: list[tuple[str, bytes]]) -> int:
    """Largest value the producer takes with this key and (part) headers."""
    return (max_message_bytes - hdr.weight(key, headers) - RECORD_OVERHEAD
            - 64)  # 64: the part headers' digits


def split(value: bytes, key: bytes | None, headers: list[tuple[str, bytes]],
          max_message_bytes: int) -> list[Part] | None:
    """The parts of an Arrow prediction message over the limit (None: it fits, or it is one
    row, which no split can help)."""
    limit = value_limit(max_message_bytes, key, headers + _part_headers("", 0, 0))
    if len(value) <= limit:
        return None
    table = decode_arrow(value)
    n = table.num_rows
    if n < 2:
        return None
    parts: list[bytes] = []
    rows = max(1, int(n * limit / len(value) * 0.9))  # bytes are close to linear in rows
    lo = 0
    while lo < n:
        hi = min(n, lo + rows)
        data = encode_arrow(table.slice(lo, hi - lo))
        if len(data) > limit and hi - lo > 1:
            rows = max(1, (hi - lo) // 2)
            continue
        parts.append(data)  # a lone row over the limit goes as it is, and is refused
        lo = hi
    source = _source(table)
    return [Part(p, key, headers + _part_headers(source, i, len(parts)))
            for i, p in enumerate(parts)]


def split_all(values: list[bytes], keys: list[bytes | None], headers: list[tuple[str, bytes]],
              max_message_bytes: int) -> tuple[list[bytes], list[bytes | None], list[Part]]:
    """The values that fit (with their keys) and the parts of those that did not."""
    if not values or max(map(len, values)) < max_message_bytes // 2:
        return values, keys, []  # the common case: nothing near the limit
    kept: list[bytes] = []
    kept_keys: list[bytes | None] = []
    parts: list[Part] = []
    for v, k in zip(values, keys, strict=True):
        got = split(v, k, headers, max_message_bytes)
        if got is None:
            kept.append(v)
            kept_keys.append(k)
        else:
            parts += got
    return kept, kept_keys, parts


def _source(table: pa.Table) -> str:
    def first(name: str) -> object:
        return table.column(name)[0].as_py() if name in table.column_names else ""

    return f"{first('source_topic')}/{first('source_partition')}/{first('source_offset')}"


def _part_headers(source: str, i: int, n: int) -> list[tuple[str, bytes]]:
    return hdr.build({SOURCE: source, PART: i, PARTS: n})
