from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from headrace.core.errors import ValidationFailed
from headrace.streams import headers as hdr
from headrace.streams.codecs import (
    decode_arrow,
    decode_batch,
    decode_json_batch,
    encode_arrow,
    encode_json,
)

ROWS = [
    {"id": 1, "x": 1.5, "name": "a", "flag": True, "tags": [1, 2]},
    {"id": 2, "x": None, "name": None, "flag": False, "tags": []},
    {"id": 3, "x": -2.0, "name": "ünï", "flag": None, "tags": None},
]


def test_json_batch_decodes_to_columns_with_nulls() -> None:
    batch = decode_json_batch([encode_json(r) for r in ROWS])
    assert batch.table.to_pylist() == ROWS
    assert batch.errors == []
    assert batch.message_index.tolist() == [0, 1, 2]


def test_arrow_round_trip_keeps_types_and_nulls() -> None:
    table = pa.Table.from_pylist(ROWS)
    back = decode_arrow(encode_arrow(table))
    assert back.equals(table)


def test_json_batch_isolates_bad_messages_and_keeps_good_rows() -> None:
    values = [encode_json(ROWS[0]), b"{broken", b"", encode_json(ROWS[2]), b"[1,2]"]
    batch = decode_json_batch(values)
    assert [i for i, _ in batch.errors] == [1, 2, 4]
    assert all(isinstance(e, ValidationFailed) for _, e in batch.errors)
    assert batch.message_index.tolist() == [0, 3]
    assert batch.table.column("id").to_pylist() == [1, 3]


def test_mixed_json_and_arrow_batch_maps_rows_to_messages() -> None:
    arrow_msg = encode_arrow(pa.table({"x": [1.0, 2.0, 3.0]}))
    values = [encode_json({"x": 9.0}), arrow_msg, b"\x00garbage"]
    types = [hdr.JSON, hdr.ARROW, hdr.ARROW]
    batch = decode_batch(values, types)
    pairs = sorted(zip(batch.message_index.tolist(), batch.row_in_message.tolist(),
                       batch.table.column("x").to_pylist(), strict=True))
    assert pairs == [(0, 0, 9.0), (1, 0, 1.0), (1, 1, 2.0), (1, 2, 3.0)]
    assert [i for i, _ in batch.errors] == [2]


def test_explicit_schema_rejects_wrong_types_per_message() -> None:
    schema = pa.schema([("x", pa.float64())])
    batch = decode_json_batch([encode_json({"x": 1.0}), encode_json({"x": "nope"})], schema)
    assert batch.table.column("x").to_pylist() == [1.0]
    assert [i for i, _ in batch.errors] == [1]


def test_truncated_arrow_is_a_clear_error() -> None:
    good = encode_arrow(pa.table({"x": np.arange(100, dtype=np.float32)}))
    with pytest.raises(ValidationFailed, match="Arrow"):
        decode_arrow(good[: len(good) // 2])
