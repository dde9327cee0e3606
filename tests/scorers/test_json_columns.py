"""JSON records of signature models parsed as one Arrow table (``json_columns``) give exactly
what the per-record path gives: same arrays, rows and reasons, for every input kind; a batch
with anything the fast path does not take (a bad, missing or pretty-printed record, a raw image)
goes the per-record way and still names each bad row."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from headrace.scorers.wire.inputs import decode_inputs, json_columns
from headrace.store.signature import InputKind, ModelInput
from headrace.streams.consuming import RawBatch
from tests.scorers import signature_models as sm

N = 96
CAT = ModelInput(name="colour", kind=InputKind.CATEGORY, dtype="string")
INT_GRID = ModelInput(name="grid", kind=InputKind.TENSOR, dtype="int64", shape=(2, 3))


def batch(values: list[bytes]) -> RawBatch:
    n = len(values)
    return RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.t"] * n,
                    np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                    np.zeros(n, np.int64), [None] * n)


def _records(kind: str) -> tuple[tuple[ModelInput, ...], list[dict[str, Any]]]:
    rng = np.random.default_rng(0)
    if kind == "text":
        words = ["good", "bad", "the", "plot", "zzz", "Ünï", "a\u00a0b"]
        return (sm.TEXT,), [{"text": " ".join(rng.choice(words, 4)), "extra": 1}
                            for _ in range(N)]
    if kind == "image+numeric":
        imgs = sm.digits(N)
        return (sm.IMAGE, sm.META), [
            {"image": base64.b64encode(sm.encode(imgs[i])).decode(), "age": i, "size": i / 3}
            for i in range(N)]
    if kind == "tensor":
        return (sm.GRID,), [{"grid": rng.normal(size=(4, 3)).round(4).tolist()}
                            for _ in range(N)]
    if kind == "int tensor":
        return (INT_GRID,), [{"grid": rng.integers(-9, 9, (2, 3)).tolist()} for _ in range(N)]
    return (CAT,), [{"colour": str(rng.choice(["red", "green", "blue"]))} for _ in range(N)]


def _both(values: list[bytes], sig: tuple[ModelInput, ...], monkeypatch: pytest.MonkeyPatch
          ) -> tuple[Any, Any, bool]:
    fast_table = json_columns.read(values, sig)
    fast = decode_inputs(batch(values), sig)
    monkeypatch.setattr(json_columns, "read", lambda v, s: None)
    slow = decode_inputs(batch(values), sig)
    monkeypatch.undo()
    return fast, slow, fast_table is not None


def _assert_same(fast: Any, slow: Any) -> None:
    assert fast.message.tolist() == slow.message.tolist()
    assert [(b.message, str(b.error)) for b in fast.bad] == [
        (b.message, str(b.error)) for b in slow.bad]
    for name in slow.arrays:
        a, b = fast.arrays[name], slow.arrays[name]
        assert a.dtype == b.dtype and a.shape == b.shape
        assert (a == b).all(), name


@pytest.mark.parametrize("kind", ["text", "image+numeric", "tensor", "int tensor", "category"])
def test_a_clean_batch_parsed_as_one_table_equals_the_per_record_decode(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sig, recs = _records(kind)
    values = [json.dumps(r).encode() for r in recs]
    fast, slow, columnar = _both(values, sig, monkeypatch)
    assert columnar  # the clean batch did take the columnar path
    assert not slow.bad and fast.message.tolist() == list(range(N))
    _assert_same(fast, slow)


@pytest.mark.parametrize("spoil", ["missing field", "null", "wrong type", "not json",
                                   "pretty-printed", "not an object", "bad base64"])
def test_a_batch_with_a_bad_record_names_it_as_the_per_record_path_does(
        spoil: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sig, recs = _records("image+numeric")
    values = [json.dumps(r).encode() for r in recs]
    bad = {"missing field": json.dumps({"image": recs[0]["image"], "age": 1}),
           "null": json.dumps({**recs[0], "size": None}),
           "wrong type": json.dumps({**recs[0], "age": "old"}),
           "not json": '{"image": ',
           "pretty-printed": json.dumps(recs[0], indent=2),
           "not an object": "[1, 2]",
           "bad base64": json.dumps({**recs[0], "image": "not base64!"})}[spoil]
    values[7] = bad.encode()
    fast, slow, _ = _both(values, sig, monkeypatch)
    _assert_same(fast, slow)
    if spoil != "pretty-printed":  # a pretty-printed record is still a good record
        assert [b.message for b in fast.bad] == [7]
    assert len(fast.message) == N - len(fast.bad)
