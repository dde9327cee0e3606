"""Publish a file of records (JSONL, CSV or Parquet) to a data stream.

The whole file is read and validated before the first message is produced, so a malformed
file sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from headrace.core.errors import ValidationFailed
from headrace.streams import headers as hdr
from headrace.streams.clients import (
    DeliveryTracker,
    KafkaConnection,
    flush_or_raise,
    make_producer,
    produce,
)
from headrace.streams.codecs import encode_arrow, encode_json

RecordFormat = Literal["json", "arrow"]
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
            ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class SendResult:
    topic: str
    rows: int
    messages: int


def read_records(path: Path) -> pa.Table:
    """Read a JSONL, CSV or Parquet file into a table; raise ``ValidationFailed`` on bad input."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValidationFailed(
            f"{path.name}: unknown file type {path.suffix!r} (use .jsonl, .csv or .parquet)")
    if not path.is_file():
        raise ValidationFailed(f"{path}: no such file")
    try:
        if kind == "jsonl":
            _check_objects(path)
            table = pajson.read_json(path)
        elif kind == "csv":
            # An empty CSV cell is a missing value, as it is for numbers.
            table = pacsv.read_csv(
                path, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
        else:
            table = pq.read_table(path)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValidationFailed(f"{path.name}: not valid {kind}: {first}") from None
    if table.num_rows == 0:
        raise ValidationFailed(f"{path.name}: holds no records")
    return table


def send_table(
    conn: KafkaConnection,
    topic: str,
    table: pa.Table,
    *,
    fmt: RecordFormat = "json",
    key_column: str | None = None,
    batch_rows: int = 10_000,
) -> SendResult:
    """Produce ``table``: one JSON message per row, or Arrow IPC messages of ``batch_rows``."""
    if key_column is not None and key_column not in table.column_names:
        raise ValidationFailed(f"key column {key_column!r} is not in {table.column_names}")
    producer = make_producer(conn)
    tracker = DeliveryTracker()
    messages = 0
    if fmt == "json":
        headers = hdr.build({hdr.CONTENT_TYPE: hdr.JSON})
        keys = table.column(key_column).to_pylist() if key_column else None
        for i, row in enumerate(table.to_pylist()):
            key = None if keys is None or keys[i] is None else str(keys[i])
            produce(producer, topic, encode_json(row), key=key, headers=headers,
                    on_delivery=tracker)
            messages += 1
            if messages % 50_000 == 0:
                producer.poll(0)
    else:
        headers = hdr.build({hdr.CONTENT_TYPE: hdr.ARROW})
        for batch in table.to_batches(max_chunksize=batch_rows):
            key = None
            if key_column:
                first = batch.column(batch.schema.get_field_index(key_column))[0].as_py()
                key = None if first is None else str(first)
            produce(producer, topic, encode_arrow(batch), key=key, headers=headers,
                    on_delivery=tracker)
            messages += 1
    flush_or_raise(producer, tracker, timeout_s=max(conn.timeout_s, 30.0))
    return SendResult(topic, table.num_rows, messages)


def send_file(conn: KafkaConnection, topic: str, path: Path, *, fmt: RecordFormat = "json",
              key_column: str | None = None, batch_rows: int = 10_000) -> SendResult:
    return send_table(conn, topic, read_records(path), fmt=fmt, key_column=key_column,
                      batch_rows=batch_rows)


def _check_objects(path: Path) -> None:
    """pyarrow's JSON reader crashes the process (pyarrow 22) when the first value is ``null``:
    a JSONL file must start with an object."""
    with path.open("rb") as f:
        head = f.read(64 * 1024).lstrip()
    if head and not head.startswith(b"{"):
        raise ValidationFailed(f"{path.name}: not valid jsonl: each line must be one JSON object")
