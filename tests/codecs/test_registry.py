"""The one codec registry is complete: every input kind of the enum has a codec holding every
piece (a codec missing one cannot be built), an unknown kind fails loudly wherever it is looked
up, and a kind outside the enum is a well-formed name the registry accepts or refuses."""

from __future__ import annotations

import base64
import dataclasses
import io
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from pydantic import ValidationError

from headrace import codecs
from headrace.cli import streams_cmd
from headrace.cli._extras import EXTRA_OF
from headrace.codecs import registry
from headrace.core.errors import PermanentError
from headrace.store.signature import InputKind, KindName, ModelInput
from headrace.trainers import columns

PIECES = [f.name for f in dataclasses.fields(codecs.Codec)
          if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def test_every_input_kind_has_one_codec_and_the_label_none() -> None:
    assert set(codecs.REGISTRY) == {k.value for k in InputKind.inputs()}
    assert {c.kind for c in codecs.BUILT_IN} == set(codecs.REGISTRY)
    with pytest.raises(codecs.UnknownKind):  # a label is a column's kind, never an input's
        codecs.codec(InputKind.LABEL)
    with pytest.raises(ValueError, match="never an input"):
        codecs.register(dataclasses.replace(codecs.codec("tensor"), kind="label"))


@pytest.mark.parametrize("kind", sorted(k.value for k in InputKind.inputs()))
def test_each_built_in_codec_holds_every_piece(kind: str) -> None:
    c = codecs.codec(kind)
    assert len(PIECES) >= 20  # the dataset, training, export, scorer and CLI pieces
    for piece in PIECES:
        value = getattr(c, piece)
        if piece in ("infer", "send_as"):
            continue  # None is a meaning there: "only forced" / "fields sent as read"
        assert value is not None, f"{kind}: {piece}"
        if piece not in ("kind", "nulls", "vocabulary", "family_kind"):
            assert callable(value), f"{kind}: {piece}"
    assert c.family_kind in codecs.REGISTRY
    assert c.send_as in (None, "number", "string")


def test_a_codec_missing_a_piece_cannot_be_built() -> None:
    whole = {f.name: getattr(codecs.codec("tensor"), f.name) for f in dataclasses.fields(
        codecs.Codec)}
    for piece in PIECES:
        partial = {k: v for k, v in whole.items() if k != piece}
        with pytest.raises(TypeError, match=piece):
            codecs.Codec(**partial)


def test_a_kind_registers_once() -> None:
    with pytest.raises(ValueError, match="has a codec already"):
        codecs.register(codecs.codec("image"))


def test_an_unknown_kind_fails_loudly_wherever_it_is_used() -> None:
    with pytest.raises(codecs.UnknownKind, match="no codec for input kind 'sound' \\(known: "):
        codecs.codec("sound")
    assert issubclass(codecs.UnknownKind, PermanentError)  # to the DLQ / a refused model
    sound = ModelInput(name="clip", kind="sound", shape=(4,))
    assert isinstance(sound.kind, KindName) and sound.kind.value == "sound"
    with pytest.raises(PermanentError, match="sound"):
        codecs.check_signature((sound,))
    with pytest.raises(codecs.UnknownKind):
        codecs.kind("sound")
    table = pa.table({"clip": ["a b c d"] * 3})
    with pytest.raises(codecs.UnknownKind):
        columns.check_kind(table, "clip", KindName("sound"))


def test_kind_names_parse_to_the_enum_or_a_kind_name() -> None:
    assert ModelInput(name="t", kind="text").kind is InputKind.TEXT
    assert codecs.kind("image") is InputKind.IMAGE and codecs.kind("label") is InputKind.LABEL
    for bad in ("Image", "two words", "", "x" * 40, 3):
        with pytest.raises(ValidationError):
            ModelInput(name="t", kind=bad)
    with pytest.raises(ValidationError, match="label is not a model input"):
        ModelInput(name="t", kind="label")
    dumped = ModelInput(name="t", kind="sound", shape=(2,)).model_dump(mode="json")
    assert dumped["kind"] == "sound"
    assert ModelInput.model_validate(dumped).kind == "sound"


@pytest.mark.parametrize(("inp", "why"), [
    (ModelInput(name="f", kind="numeric"), "names no columns"),
    (ModelInput(name="f", kind="numeric", columns=("a", "b"), shape=(3,)), "shape must be"),
    (ModelInput(name="i", kind="image", height=4), "needs height, width and channels"),
    (ModelInput(name="t", kind="tensor"), "needs a shape"),
])
def test_each_codec_checks_the_fields_its_kind_needs(inp: ModelInput, why: str) -> None:
    with pytest.raises(PermanentError, match=why):
        codecs.check_signature((inp,))


def test_inference_asks_text_before_category_and_never_a_forced_only_kind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    order = [c.kind for c in codecs.inferring()]
    assert order.index("text") < order.index("category")
    table = pa.table({"n": [1.0, 2.0], "words": ["one two three", "four five six"],
                      "tag": ["a", "b"], "blob": [b"x", b"y"], "vec": [[1, 2], [3, 4]]})
    want = {"n": "numeric", "words": "text", "tag": "category", "blob": "image", "vec": "tensor"}
    assert {k: str(v) for k, v in columns.kinds_of(table).items()} == want
    monkeypatch.setitem(codecs.REGISTRY, "anything", dataclasses.replace(
        codecs.codec("tensor"), kind="anything", infer=None, infer_rank=-1))
    assert "anything" not in [c.kind for c in codecs.inferring()]
    assert {k: str(v) for k, v in columns.kinds_of(table).items()} == want


def test_tail_shows_each_field_by_its_kind() -> None:
    png = base64.b64encode(_png()).decode()
    look_alike = "/9j/" + "x" * 80  # a text that starts like a base64 JPEG
    assert codecs.codec("image").summary(png).startswith("<image/png 3x2 ")
    assert codecs.codec("tensor").summary([[0.5] * 5] * 4) == "<tensor float32 (4, 5)>"
    assert codecs.codec("tensor").summary([1, 2]) == [1, 2]  # small: shown as it is
    assert codecs.codec("text").summary(look_alike) == look_alike
    by_field = streams_cmd.shown(
        {"photo": png, "note": look_alike, "f0": 1.5, "other": [0] * 40},
        {"photo": codecs.codec("image").summary, "note": codecs.codec("text").summary,
         "f0": codecs.codec("numeric").summary})
    assert by_field["photo"].startswith("<image/png") and by_field["note"] == look_alike
    assert by_field["f0"] == 1.5 and by_field["other"] == "<tensor int64 (40,)>"
    rows = streams_cmd.shown([{"note": look_alike}], {"note": codecs.codec("text").summary})
    assert rows == [{"note": look_alike}]


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (3, 2)).save(out, format="PNG")
    return out.getvalue()


def test_the_registry_loads_no_role_library() -> None:
    """send and tail (a base install) look codecs up: Pillow loads only when an image is read."""
    code = ("import sys, headrace.codecs, headrace.cli.streams_cmd; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(EXTRA_OF)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


def test_the_helpers_a_plug_in_kind_borrows() -> None:
    inp = ModelInput(name="v", kind="tensor", shape=(2,))
    v = np.ones((3, 2), np.float64)
    assert registry.floats(inp, v, ()).dtype == np.float32
    assert registry.same_shape(inp, inp, v) is v
    assert registry.same_shape(inp, ModelInput(name="v", kind="tensor", shape=(3,)), v) is None
    assert codecs.vocabulary_file("q") == "vocabulary-q.json"
