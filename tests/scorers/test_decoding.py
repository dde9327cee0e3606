"""The decoder on its own: no broker, real msgspec and Arrow payloads."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from headrace.scorers.wire.decoding import decode
from headrace.streams import headers as hdr
from headrace.streams.codecs import encode_arrow
from headrace.streams.consuming import RawBatch

FEATURES = ("a", "b-c", "d e")  # any feature name works, not only identifiers


def _batch(values: list[bytes], content_types: list[str | None]) -> RawBatch:
    n = len(values)
    return RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.t"] * n,
                    np.zeros(n, np.int32), np.arange(n, dtype=np.int64), np.zeros(n, np.int64),
                    [None if ct is None else [(hdr.CONTENT_TYPE, ct.encode())]
                     for ct in content_types])


def test_payload_bytes_pick_the_codec_and_each_bad_record_gets_its_own_reason() -> None:
    good = json.dumps({"a": 1, "b-c": 2.5, "d e": -3, "extra": "ignored"}).encode()
    arrow = encode_arrow(pa.table({"a": [1.0, 2.0], "b-c": [3, 4], "d e": [5.0, 6.0]}))
    values = [
        good,                                          # 0 scored
        arrow,                                         # 1 scored (2 rows), no header needed
        b'{"a": 1, "b-c": "x", "d e": 3}',             # 2 wrong type
        b'{"a": 1, "d e": 3}',                         # 3 missing feature
        b"null",                                       # 4 not an object
        b"\x00garbage",                                # 5 labelled Arrow, is not
        b'{"a": 1e39, "b-c": 0, "d e": 0}',            # 6 finite in JSON, inf as float32
        b'{"a": 1, "b-c": 2',                          # 7 truncated
        b'  {"a": 7, "b-c": 8, "d e": 9}\n',           # 8 whitespace around one object: fine
    ]
    cts: list[str | None] = [hdr.JSON, None, hdr.JSON, hdr.JSON, hdr.JSON, hdr.ARROW, hdr.JSON,
                             None, hdr.JSON]
    feats = decode(_batch(values, cts), FEATURES)

    # JSON rows first, then each Arrow message's rows; message/row say where each came from.
    assert feats.message.tolist() == [0, 8, 1, 1]
    assert feats.row.tolist() == [0, 0, 0, 1]
    np.testing.assert_array_equal(
        feats.x, np.asarray([[1, 2.5, -3], [7, 8, 9], [1, 3, 5], [2, 4, 6]], np.float32))
    reasons = {b.message: (b.stage, str(b.error)) for b in feats.bad}
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7]
    assert reasons[2][0] == "validate" and "b-c" in reasons[2][1]
    assert reasons[3][0] == "validate" and "b-c" in reasons[3][1]
    assert reasons[4][0] == "validate"
    assert reasons[5] == ("decode", "content-type says Arrow IPC but the payload is not an "
                                    "Arrow IPC stream (no 0xFFFFFFFF continuation marker)")
    assert reasons[6][0] == "validate" and "'a'" in reasons[6][1]
    assert reasons[7][0] == "decode" and "undecodable JSON record" in reasons[7][1]


def test_an_all_good_json_batch_keeps_message_order() -> None:
    values = [json.dumps({"a": i, "b-c": -i, "d e": i / 2}).encode() for i in range(1000)]
    feats = decode(_batch(values, [hdr.JSON] * 1000), FEATURES)
    assert not feats.bad
    assert feats.message.tolist() == list(range(1000))
    assert feats.x[:, 0].tolist() == [float(i) for i in range(1000)]


def test_arrow_columns_of_any_numeric_type_and_many_record_batches() -> None:
    import decimal

    schema = pa.schema([("d e", pa.decimal128(6, 2)), ("a", pa.int8()), ("b-c", pa.bool_()),
                        ("note", pa.string())])
    batches = [pa.record_batch([pa.array([decimal.Decimal("1.25"), None], schema[0].type),
                                pa.array([1, 2], pa.int8()), pa.array([True, False]),
                                pa.array(["x", "y"])], schema=schema),
               pa.record_batch([pa.array([decimal.Decimal("-3.50")], schema[0].type),
                                pa.array([-7], pa.int8()), pa.array([None], pa.bool_()),
                                pa.array(["z"])], schema=schema),
               pa.record_batch([pa.array([decimal.Decimal("4.00")], schema[0].type),
                                pa.array([9], pa.int8()), pa.array([True]),
                                pa.array(["w"])], schema=schema)]
    mixed = encode_arrow(pa.Table.from_batches(batches))
    floats = encode_arrow(pa.table({"a": pa.array([0.5], pa.float16()),
                                    "b-c": pa.array([2**40], pa.uint64()),
                                    "d e": pa.array([1.5], pa.float64())}))
    repeated = encode_arrow(pa.Table.from_arrays(
        [pa.array([1.0]), pa.array([2.0]), pa.array([3.0]), pa.array([4.0])],
        names=["a", "b-c", "d e", "a"]))
    text = encode_arrow(pa.table({"a": ["1"], "b-c": [1.0], "d e": [1.0]}))
    feats = decode(_batch([mixed, floats, repeated, text], [hdr.ARROW] * 4), FEATURES)

    # rows 1 (null decimal) and 2 (null bool) of the first message are rejected one by one
    assert feats.message.tolist() == [0, 0, 1]
    assert feats.row.tolist() == [0, 3, 0]
    np.testing.assert_array_equal(
        feats.x, np.asarray([[1, 1, 1.25], [9, 1, 4], [0.5, 2**40, 1.5]], np.float32))
    reasons = {(b.message, b.row): (b.stage, str(b.error)) for b in feats.bad}
    assert reasons[(0, 1)] == ("validate", "feature 'd e' is missing, null or not finite")
    assert reasons[(0, 2)] == ("validate", "feature 'b-c' is missing, null or not finite")
    stage, why = reasons[(2, None)]
    assert stage == "validate" and "repeats column(s) ['a']" in why
    stage, why = reasons[(3, None)]
    assert stage == "validate" and "non-numeric type string" in why
    assert len(reasons) == 4
