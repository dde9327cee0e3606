"""The scorer's input kinds dispatch through the one registry (``headrace/codecs``):
every kind has a codec, an unknown kind fails loudly instead of decoding as text, a toy kind
registered in one place decodes from JSON (per record and columnar) and from Arrow, and no
module of ``scorers/inputs`` but the registry branches on a kind."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace import codecs
from headrace.codecs import json_values
from headrace.codecs.columns import Limits, Reasons, present
from headrace.scorers.wire.inputs import decode_inputs
from headrace.store.signature import InputKind, ModelInput
from headrace.streams.codecs import encode_arrow
from tests.scorers.test_json_columns import batch

INPUTS = Path(__file__).resolve().parents[2] / "headrace" / "scorers" / "inputs"


def test_every_input_kind_has_a_scorer_codec() -> None:
    assert set(codecs.REGISTRY) == {k.value for k in InputKind.inputs()}
    with pytest.raises(codecs.UnknownKind):  # a label is a column's kind, never an input's
        codecs.codec(InputKind.LABEL)


def test_an_unknown_kind_fails_loudly_and_names_the_known_ones() -> None:
    with pytest.raises(codecs.UnknownKind, match="no codec for input kind 'sound'"):
        codecs.codec("sound")
    sound = ModelInput.model_construct(name="clip", kind="sound", shape=(4,))
    with pytest.raises(codecs.UnknownKind):
        decode_inputs(batch([json.dumps({"clip": "x"}).encode()]), (sound,))


def _points(inp: ModelInput, arr: pa.Array, limits: Limits,
            conversions: Counter[str] | None) -> tuple[np.ndarray, Reasons]:
    """A toy kind: "x,y" strings to float32 (2,) points."""
    out = np.zeros((len(arr), 2), np.float32)
    reasons: Reasons = {}
    for i, v in enumerate(arr.to_pylist()):
        try:
            out[i] = [float(p) for p in v.split(",")]
        except (AttributeError, ValueError):
            reasons[i] = f"input {inp.name!r}: not a point"
    return out, reasons


def test_a_toy_kind_registered_in_one_place_decodes_from_json_and_arrow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The scorer's pieces are this test's; the others (not used here) borrowed from tensor.
    monkeypatch.setitem(codecs.REGISTRY, "point", dataclasses.replace(
        codecs.codec("tensor"), kind="point",
        build=present(_points, lambda inp, n: np.zeros((n, 2), np.float32)),
        from_json=json_values.texts, json_type=lambda inp: pa.string()))
    where = ModelInput.model_construct(name="where", kind="point", shape=(2,), columns=())
    want = np.array([[i, -i / 2] for i in range(80)], np.float32)
    records = [json.dumps({"where": f"{x},{y}"}).encode() for x, y in want.tolist()]
    for values in (records, records[:3]):  # columnar, then per record (a small batch)
        dec = decode_inputs(batch([*values, b'{"where": "nowhere"}']), (where,))
        np.testing.assert_array_equal(dec.arrays["where"], want[:len(values)])
        assert [str(b.error) for b in dec.bad] == ["input 'where': not a point"]
    arrow = encode_arrow(pa.table({"where": [f"{x},{y}" for x, y in want.tolist()]}))
    np.testing.assert_array_equal(decode_inputs(batch([arrow]), (where,)).arrays["where"], want)


def test_no_module_of_scorers_inputs_but_the_registry_branches_on_a_kind() -> None:
    branch = re.compile(r"\.kind\s*(==|!=|\bin\b)|InputKind\.[A-Z]+\s*(==|!=)|"
                        r"==\s*InputKind\.")
    offenders = [f"{p.name}:{n}" for p in sorted(INPUTS.glob("*.py")) if p.name != "codecs.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if branch.search(line)]
    assert offenders == []
