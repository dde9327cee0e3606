"""Read messages from a topic and decode them by their content-type header (values in the Schema
Registry wire format by their schema id, through the registry when one is given)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

from headrace.core import bounded_json
from headrace.core.errors import ValidationFailed
from headrace.core.limits import MAX_RECORD_BYTES
from headrace.streams import headers as hdr
from headrace.streams.avro_records import WireDecoder
from headrace.streams.client_errors import good_messages
from headrace.streams.clients import KafkaConnection, make_consumer, partitions_of
from headrace.streams.codecs import decode_arrow
from headrace.streams.schema_registry import SchemaRegistry, wire_schema_id
from headrace.streams.summaries import image_type


@dataclass(frozen=True)
class TailedMessage:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: str | None
    headers: dict[str, str]
    value: Any  # decoded: a dict, a list of rows (Arrow), a string, or None
    raw: bytes | None
    schema_id: int | None = None  # a Schema Registry wire-format value's schema id


def _wire_id(value: bytes | None, headers: dict[str, str]) -> int | None:
    """The schema id of a wire-format value (never of one labelled JSON or Arrow)."""
    if headers.get(hdr.CONTENT_TYPE) in (hdr.JSON, hdr.ARROW):
        return None
    return wire_schema_id(value)


def decode_value(value: bytes | None, headers: dict[str, str],
                 wire: WireDecoder | None = None) -> Any:
    """The value decoded: JSON, Arrow rows (tensors as nested lists), an image's bytes as
    they are, a wire-format record through its schema. ``summaries.summarise`` shortens it
    for display."""
    if value is None:
        return None
    if _wire_id(value, headers) is not None:
        return (wire or WireDecoder(None)).decode(value)
    ctype = headers.get(hdr.CONTENT_TYPE)
    if ctype == hdr.ARROW:
        try:
            return _tensor_columns(decode_arrow(value)).to_pylist()
        except Exception as exc:  # any bytes may come labelled Arrow
            return f"<undecodable Arrow: {str(exc).splitlines()[0][:200] if str(exc) else exc!r}>"
    if (ctype or "").startswith("image/") or image_type(value):
        return value
    try:  # bounded: a value nested too deep or too big to show is shown as text
        return bounded_json.loads(value, max_bytes=MAX_RECORD_BYTES)
    except ValidationFailed:
        return value.decode("utf-8", "replace")


def _tensor_columns(table: pa.Table) -> pa.Table:
    """Fixed-shape tensor columns as nested lists (their own Python form is a flat list)."""
    for j, f in enumerate(table.schema):
        if isinstance(f.type, pa.FixedShapeTensorType):
            nested = table.column(j).combine_chunks().to_numpy_ndarray().tolist()
            table = table.set_column(j, f.name, pa.array(nested))
    return table


def tail(
    conn: KafkaConnection,
    topic: str,
    *,
    from_beginning: bool = False,
    max_messages: int | None = None,
    idle_timeout_s: float | None = None,
    registry: SchemaRegistry | None = None,
) -> Iterator[TailedMessage]:
    """Yield decoded messages from every partition; no consumer group offsets are committed.
    ``registry``: decodes wire-format values (else they are shown by schema id only)."""
    wire = WireDecoder(registry)
    parts = partitions_of(conn, topic)
    consumer = make_consumer(conn, f"headrace-tail-{uuid.uuid4().hex[:8]}",
                             **{"enable.auto.commit": False})
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    consumer.assign([TopicPartition(topic, p, start) for p in parts])
    seen = 0
    last = time.monotonic()
    try:
        while max_messages is None or seen < max_messages:
            msgs = consumer.consume(num_messages=500, timeout=0.2)
            if not msgs:
                if idle_timeout_s is not None and time.monotonic() - last > idle_timeout_s:
                    return
                continue
            last = time.monotonic()
            for m in good_messages(msgs, what=f"tail {topic}"):  # fatal raises
                h = hdr.to_dict(m.headers())
                key = m.key()
                yield TailedMessage(
                    topic=m.topic() or topic, partition=m.partition() or 0,
                    offset=m.offset() or 0,
                    timestamp_ms=m.timestamp()[1], key=key.decode("utf-8", "replace") if key
                    is not None else None, headers=h, value=decode_value(m.value(), h, wire),
                    raw=m.value(), schema_id=_wire_id(m.value(), h),
                )
                seen += 1
                if max_messages is not None and seen >= max_messages:
                    return
    finally:
        consumer.close()
