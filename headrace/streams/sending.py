"""Publish a file of records (JSONL, CSV or Parquet) or a folder of images to a data stream.

The whole file is read and validated before the first message is produced, so a malformed
file sends nothing -- unless the caller chooses to send the good records and set the bad ones
aside (``headrace send --skip-bad``); either way each bad record is named by its line number.
Formats: ``json`` (one object per record; binary columns such as encoded images as base64
strings, tensors as nested arrays), ``arrow`` (Arrow IPC batches, columns as they are), ``raw``
(one message per record holding its one binary column as is, with the image content type its
bytes show: ``image/png`` / ``image/jpeg``). A folder of PNG/JPEG files is one record per file.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from headrace.core.errors import ValidationFailed
from headrace.core.file_errors import without_contents
from headrace.streams import headers as hdr
from headrace.streams.clients import KafkaConnection
from headrace.streams.codecs import encode_arrow, encode_json
from headrace.streams.producing import BatchProducer
from headrace.streams.summaries import image_type

RecordFormat = Literal["json", "arrow", "raw"]
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
            ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class SendResult:
    topic: str
    rows: int
    messages: int


@dataclass(frozen=True)
class BadLine:
    """A record of the file that cannot be sent, with its line number and why."""

    line: int  # 1-based line of the file (a CSV's header is line 1)
    reason: str
    text: str  # the line as written (CSV: re-written as one CSV row)

    def describe(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class ReadRecords:
    table: pa.Table
    bad: tuple[BadLine, ...] = ()
    header: str | None = None  # a CSV's header line, for the side file


def read_records(path: Path) -> pa.Table:
    """Read a JSONL, CSV or Parquet file into a table; raise ``ValidationFailed`` on bad input,
    naming the file's line numbers of the bad records."""
    got = read_checked(path)
    if got.bad:
        raise ValidationFailed(bad_lines_message(path, got))
    return got.table


def bad_lines_message(path: Path, got: ReadRecords, *, show: int = 10) -> str:
    lines = [f"{path.name}: {len(got.bad)} bad record{'s' if len(got.bad) != 1 else ''} "
             f"(nothing sent; --skip-bad sends the {got.table.num_rows} good ones and writes "
             f"the bad lines to {side_file(path).name}):"]
    lines += [f"  {b.describe()}" for b in got.bad[:show]]
    if len(got.bad) > show:
        lines.append(f"  ... and {len(got.bad) - show} more")
    return "\n".join(lines)


def side_file(path: Path) -> Path:
    """Where ``--skip-bad`` writes the bad lines: next to the file, ``NAME.bad.SUFFIX``."""
    return path.with_name(f"{path.stem}.bad{path.suffix}")


def write_side_file(path: Path, got: ReadRecords) -> Path:
    out = side_file(path)
    with out.open("w", encoding="utf-8") as f:
        if got.header is not None:
            f.write(got.header + "\n")
        for b in got.bad:
            f.write(b.text.rstrip("\r\n") + "\n")
    return out


def read_image_folder(path: Path, *, column: str = "image") -> pa.Table:
    """A folder's PNG/JPEG files as a table: ``key`` (the file name) and ``column`` (bytes)."""
    files = sorted(p for p in path.iterdir() if p.is_file()
                   and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValidationFailed(f"{path}: holds no .png or .jpg files")
    data = [f.read_bytes() for f in files]
    bad = [f.name for f, d in zip(files, data, strict=True) if image_type(d) is None]
    if bad:
        raise ValidationFailed(f"{path}: not PNG or JPEG: {bad[:5]}")
    return pa.table({"key": [f.name for f in files], column: pa.array(data, pa.binary())})


def read_checked(path: Path, *, numeric: Sequence[str] = (),
                 strings: Sequence[str] = (), image_column: str = "image") -> ReadRecords:
    """Read a file, setting aside the records that cannot be sent (with line numbers).

    ``numeric`` / ``strings``: columns the model takes as numbers / strings (from its
    signature). Other columns are typed by what most records hold; a record whose value does not
    fit its column's type is bad, so one stray text cell never turns a number column to text.
    """
    if path.is_dir():
        return ReadRecords(read_image_folder(path, column=image_column))
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValidationFailed(
            f"{path.name}: unknown file type {path.suffix!r} (use .jsonl, .csv or .parquet)")
    if not path.is_file():
        raise ValidationFailed(f"{path}: no such file")
    try:
        if kind == "jsonl":
            got = _read_jsonl(path, numeric, strings)
        elif kind == "csv":
            got = _read_csv(path, numeric, strings)
        else:
            got = ReadRecords(pq.read_table(path))
    except (pa.ArrowInvalid, pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise ValidationFailed(f"{path.name}: not valid {kind}: {without_contents(exc)}"
                               ) from None
    if got.table.num_rows == 0 and not got.bad:
        raise ValidationFailed(f"{path.name}: holds no records")
    return got


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _read_jsonl(path: Path, numeric: Sequence[str], strings: Sequence[str]) -> ReadRecords:
    _check_objects(path)
    try:
        table = pajson.read_json(path)
        if _fits(table, numeric, strings):
            return ReadRecords(table)
    except pa.ArrowInvalid:
        pass  # find the bad lines one by one
    rows: list[tuple[int, str, dict[str, Any]]] = []
    bad: list[BadLine] = []
    with path.open(encoding="utf-8") as f:
        for n, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                bad.append(BadLine(n, f"not JSON: {exc.msg} at column {exc.colno}", text))
                continue
            if not isinstance(obj, dict):
                bad.append(BadLine(n, f"not a JSON object but {_kind_of(obj)}", text))
                continue
            rows.append((n, text, obj))
    expected = _expected_kinds([r for _, _, r in rows], numeric, strings)
    good: list[dict[str, Any]] = []
    for n, text, obj in rows:
        why = [f"field {k!r} is {_kind_of(v)}, expected {expected[k]}"
               for k, v in obj.items() if v is not None and _kind_of(v) != expected.get(k)]
        if why:
            bad.append(BadLine(n, "; ".join(why), text))
        else:
            good.append(obj)
    bad.sort(key=lambda b: b.line)
    return ReadRecords(pa.Table.from_pylist(good), tuple(bad))


def _expected_kinds(rows: Sequence[dict[str, Any]], numeric: Sequence[str],
                    strings: Sequence[str]) -> dict[str, str]:
    seen: dict[str, Counter[str]] = {}
    for r in rows:
        for k, v in r.items():
            if v is not None:
                seen.setdefault(k, Counter())[_kind_of(v)] += 1
    out = {k: c.most_common(1)[0][0] for k, c in seen.items()}
    out.update({k: "a number" for k in numeric})
    out.update({k: "a string" for k in strings})
    return out


def _fits(table: pa.Table, numeric: Sequence[str], strings: Sequence[str]) -> bool:
    names = set(table.column_names)
    return all(pa.types.is_integer(table.schema.field(c).type)
               or pa.types.is_floating(table.schema.field(c).type)
               or pa.types.is_null(table.schema.field(c).type)
               for c in numeric if c in names) and all(
        pa.types.is_string(table.schema.field(c).type)
        or pa.types.is_null(table.schema.field(c).type) for c in strings if c in names)


def _read_csv(path: Path, numeric: Sequence[str], strings: Sequence[str]) -> ReadRecords:
    # An empty CSV cell is a missing value, as it is for numbers.
    opts = pacsv.ConvertOptions(strings_can_be_null=True,
                                column_types={c: pa.string() for c in strings})
    table = pacsv.read_csv(path, convert_options=opts)
    suspect = [c for c in table.column_names
               if pa.types.is_string(table.schema.field(c).type) and c not in strings
               and (c in numeric or _mostly_numbers(table.column(c)))]
    if not suspect:
        return ReadRecords(table)
    # A few text cells in a number column: those records are bad, the column stays numeric.
    bad: list[BadLine] = []
    keep: list[bool] = []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        index = {name: i for i, name in enumerate(header)}
        for row in reader:
            why = [f"column {c!r}: not a number (a text of {len(row[index[c]])} characters)"
                   for c in suspect
                   if index[c] < len(row) and row[index[c]] != "" and not _number(row[index[c]])]
            keep.append(not why)
            if why:
                bad.append(BadLine(reader.line_num, "; ".join(why), _csv_line(row)))
    if len(keep) != table.num_rows:  # pyarrow and csv disagree on the rows: say so plainly
        raise ValidationFailed(f"{path.name}: could not line up the CSV rows to find the bad "
                               "ones; check quoting")
    good = table.filter(pa.array(keep))
    for c in suspect:
        i = good.schema.get_field_index(c)
        good = good.set_column(i, c, good.column(c).cast(pa.float64()))
    return ReadRecords(good, tuple(bad), header=_csv_line(header))


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _mostly_numbers(col: pa.ChunkedArray) -> bool:
    values = [v for v in col.to_pylist() if v not in (None, "")]
    return bool(values) and sum(_number(v) for v in values) * 2 > len(values)


def _csv_line(row: Sequence[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(row)
    return buf.getvalue()


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
    producer = BatchProducer(conn)
    messages = 0
    if fmt == "raw":
        messages = _send_raw(producer, topic, table, key_column)
    elif fmt == "json":
        headers = hdr.build({hdr.CONTENT_TYPE: hdr.JSON})
        keys = record_keys(table, key_column)
        for row, key in zip(json_ready(table).to_pylist(), keys, strict=True):
            producer.produce(topic, encode_json(row), key, headers)
            messages += 1
            if messages % 50_000 == 0:
                producer.poll()
    else:
        headers = hdr.build({hdr.CONTENT_TYPE: hdr.ARROW})
        for batch in table.to_batches(max_chunksize=batch_rows):
            key = None
            if key_column:
                first = batch.column(batch.schema.get_field_index(key_column))[0].as_py()
                key = None if first is None else str(first)
            producer.produce(topic, encode_arrow(batch), key, headers)
            messages += 1
    producer.flush(max(conn.timeout_s, 30.0))
    return SendResult(topic, table.num_rows, messages)


KEY_FIELD = "key"  # a record's own key, as docs/scoring.md says


def record_keys(table: pa.Table, key_column: str | None = None) -> list[str | None]:
    """Each row's message key: column ``key_column``, else the rows' ``key`` field when they
    have one (``send`` and ``predict`` key records the same way), else none."""
    if key_column is None and KEY_FIELD in table.column_names:
        key_column = KEY_FIELD
    if key_column is None:
        return [None] * table.num_rows
    return [None if k is None else str(k) for k in table.column(key_column).to_pylist()]


def json_ready(table: pa.Table) -> pa.Table:
    """Binary columns as base64 strings, fixed-shape tensors as nested lists."""
    for j, f in enumerate(table.schema):
        col = table.column(j)
        if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            text = [None if v is None else base64.b64encode(v).decode()
                    for v in col.to_pylist()]
            table = table.set_column(j, f.name, pa.array(text, pa.string()))
        elif isinstance(f.type, pa.FixedShapeTensorType):
            nested = col.combine_chunks().to_numpy_ndarray().tolist()
            table = table.set_column(j, f.name, pa.array(nested))
    return table


def _send_raw(producer: BatchProducer, topic: str, table: pa.Table,
              key_column: str | None) -> int:
    binary = [f.name for f in table.schema
              if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
    if len(binary) != 1:
        raise ValidationFailed(f"raw format needs exactly one binary column, found {binary}")
    values = table.column(binary[0]).to_pylist()
    keys = record_keys(table, key_column)
    types = [None if v is None else image_type(v) for v in values]
    if None in types:
        raise ValidationFailed(f"raw format: row {types.index(None)} of {binary[0]!r} is not "
                               f"a PNG or JPEG image")
    for n, (value, key, ctype) in enumerate(zip(values, keys, types, strict=True), 1):
        producer.produce(topic, value, key, hdr.build({hdr.CONTENT_TYPE: ctype}))
        if n % 10_000 == 0:
            producer.poll()
    return len(values)


def _check_objects(path: Path) -> None:
    """pyarrow's JSON reader crashes the process (pyarrow 22) when the first value is ``null``:
    a JSONL file must start with an object."""
    with path.open("rb") as f:
        head = f.read(64 * 1024).lstrip()
    if head and not head.startswith(b"{"):
        raise ValidationFailed(f"{path.name}: not valid jsonl: each line must be one JSON object")
