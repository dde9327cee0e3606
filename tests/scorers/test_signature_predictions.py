"""Signature-model predictions built column by column carry exactly the records the row-by-row
reference (``predictions.rows``) builds: classes with and without top-k, values, several
outputs, odd keys and several source topics, as JSON lines and as Arrow tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headrace.scorers.wire.encoding import arrow_predictions
from headrace.scorers.wire.predictions import Columns, Source, arrow_table, json_lines, rows
from headrace.store.signature import ModelOutput, OutputKind
from headrace.streams.codecs import decode_arrow

MANY = ModelOutput(name="kind", kind=OutputKind.CLASSES, classes=tuple('abcdefghij"\\k'))
FEW = ModelOutput(name="yn", kind=OutputKind.CLASSES, classes=("n", "y"))
VALUE = ModelOutput(name="w", kind=OutputKind.VALUES, shape=(2,))

CASES = {
    "many classes": [MANY],
    "few classes": [FEW],
    "values": [VALUE],
    "several outputs": [MANY, VALUE, FEW],
}


def _batch(outs: list[ModelOutput], n: int) -> tuple[list[tuple[ModelOutput, np.ndarray]], Source]:
    rng = np.random.default_rng(7)
    ys = [(o, (rng.normal(size=(n, o.width)) * 10.0 ** rng.integers(-8, 8, (n, o.width))
               ).astype(np.float32)) for o in outs]
    keys: list[bytes | None] = [f"k{i}".encode() for i in range(n)]
    keys[1], keys[2], keys[3] = None, b"\xff\xfe", b'q"\\\n'
    topics = ["data.a" if i % 3 else "data.b" for i in range(n)]
    src = Source(keys, topics, np.arange(n, dtype=np.int32) % 4,
                 np.arange(n, dtype=np.int64) * 1000, np.arange(n, dtype=np.int32) % 5)
    return ys, src


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("top_k", [None, 0, 3])
def test_columnar_json_predictions_are_the_row_by_row_records(case: str,
                                                               top_k: int | None) -> None:
    ys, src = _batch(CASES[case], 40)
    kw = {"model_name": "m\u00e9", "model_version": 3, "top_k": top_k}
    want = [json.loads(v) for v in json_lines(rows(ys, src, **kw))]
    cols = Columns(ys, src, **kw)
    assert [json.loads(v) for v in cols.json_lines()] == want
    assert [json.loads(v) for v in cols.json_lines(5, 17)] == want[5:17]
    assert cols.json_lines(9, 9) == []


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("top_k", [None, 3])
def test_columnar_arrow_predictions_are_the_row_by_row_table(case: str,
                                                             top_k: int | None) -> None:
    ys, src = _batch(CASES[case], 30)
    kw = {"model_name": "m", "model_version": 2, "top_k": top_k}
    recs = rows(ys, src, **kw)
    want = decode_arrow(arrow_predictions(arrow_table(recs[4:21])))
    got = decode_arrow(arrow_predictions(Columns(ys, src, **kw).arrow_table(4, 21)))
    assert got.schema == want.schema
    for name in got.column_names:
        g, w = got.column(name).to_pylist(), want.column(name).to_pylist()
        if name == "outputs":  # a JSON object per row: compared as values
            g = [None if v is None else json.loads(v) for v in g]
            w = [None if v is None else json.loads(v) for v in w]
        assert g == w, name


@pytest.mark.parametrize("values", [
    ["k0", None, "", "é✓ key"],  # nothing to escape: quoted as they are
    ['q"x', "b\\s", "plain", None],  # quotes and backslashes: replaced by kernels
    ["n\nl", "tab\there", 'q"', "x"],  # control characters: json.dumps
])
def test_keys_become_the_json_string_literals_json_dumps_writes(values: list[str | None]
                                                                ) -> None:
    import pyarrow as pa

    from headrace.scorers.wire.encoding import _json_strings

    got = _json_strings(pa.array(values, pa.string())).to_pylist()
    assert got == ["null" if v is None else json.dumps(v, ensure_ascii=False) for v in values]
