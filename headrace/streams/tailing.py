"""Read messages from a topic and decode them by their content-type header."""

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
from headrace.streams.client_errors import good_messages
from headrace.streams.clients import KafkaConnection, make_consumer, partitions_of
from headrace.streams.codecs import decode_arrow
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


def decode_value(value: bytes | None, headers: dict[str, str]) -> Any:
    """The value decoded: JSON, Arrow rows (tensors as nested lists), an image's bytes as
    they are. ``summaries.summarise`` shortens it for display."""
    if value is None:
        return None
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
) -> Iterator[TailedMessage]:
    """Yield decoded messages from every partition; no consumer group offsets are committed."""
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
                    is not None else None, headers=h, value=decode_value(m.value(), h),
                    raw=m.value(),
                )
                seen += 1
                if max_messages is not None and seen >= max_messages:
                    return
    finally:
        consumer.close()
