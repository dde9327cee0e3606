"""Decoding batches into a model's signature, without a broker: columns per kind, the reason
of every bad row, the hostile-payload limits, top-k, and the batch sizing arithmetic."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from headrace.scorers.engine import sizing
from headrace.scorers.wire.arrow_limits import read_meta
from headrace.scorers.wire.budget import MessageCaps, admit
from headrace.scorers.wire.inputs import InputLimits, decode_inputs, signature_bytes
from headrace.scorers.wire.predictions import Source, rows, top_k_for
from headrace.store import tokens
from headrace.store.signature import ModelOutput, OutputKind
from headrace.streams import headers as hdr
from headrace.streams.codecs import encode_arrow
from headrace.streams.consuming import RawBatch
from tests.scorers import signature_models as sm
from tests.scorers.signature_models import GRID, IMAGE, META, TEXT, decoded, digits, encode


def batch(values: list[bytes], headers: list[list[tuple[str, bytes]] | None] | None = None
          ) -> RawBatch:
    n = len(values)
    return RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.t"] * n,
                    np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                    np.zeros(n, np.int64), list(headers or [None] * n))


def reasons(dec: object) -> dict[int, str]:
    return {b.message: str(b.error) for b in dec.bad}  # type: ignore[attr-defined]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_images_from_json_raw_bytes_and_arrow_decode_to_the_same_pixels() -> None:
    imgs = digits(3)
    png = [encode(i) for i in imgs]
    values = [json.dumps({"image": b64(png[0])}).encode(), png[1],
              encode_arrow(pa.table({"image": pa.array([png[2]], pa.binary())}))]
    heads = [None, [(hdr.CONTENT_TYPE, b"image/png")], None]
    dec = decode_inputs(batch(values, heads), (IMAGE,))
    assert not dec.bad
    assert dec.message.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(dec.arrays["image"], imgs[..., None].astype(np.float32))


def test_each_bad_image_gets_its_own_reason_naming_the_input() -> None:
    big = np.zeros((64, 64), np.uint8)
    rgb = np.zeros((8, 8, 3), np.uint8)
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, format="PNG")
    good = encode(digits(1)[0])
    values = [json.dumps({"image": b64(good)}).encode(),
              json.dumps({"image": b64(b"\x89PNG\r\n\x1a\nbroken")}).encode(),
              json.dumps({"image": b64(encode(big))}).encode(),
              json.dumps({"image": b64(buf.getvalue())}).encode(),
              json.dumps({"other": 1}).encode(),
              json.dumps({"image": "not base64!"}).encode()]
    dec = decode_inputs(batch(values), (IMAGE,), InputLimits(max_image_pixels=1000))
    why = reasons(dec)
    # A colour image into a grey model is converted (luma) and counted, not refused.
    assert dec.message.tolist() == [0, 3] and dec.conversions == {"RGB->L": 1}
    assert "undecodable" in why[1] and "'image'" in why[1]
    assert "64x64 pixels is over the limit of 1000" in why[2]
    assert why[4] == "input 'image' is missing"
    assert "not base64" in why[5]
    np.testing.assert_array_equal(dec.arrays["image"][0], decoded(good))


def test_an_image_of_another_size_is_resized_to_the_model() -> None:
    img = np.full((16, 24), 200, np.uint8)
    dec = decode_inputs(batch([json.dumps({"image": b64(encode(img))}).encode()]), (IMAGE,))
    assert dec.arrays["image"].shape == (1, 8, 8, 1)
    assert np.allclose(dec.arrays["image"], 200)


def test_tensors_from_nested_json_fixed_size_lists_and_tensor_type() -> None:
    x = np.arange(3 * 12, dtype=np.float32).reshape(3, 4, 3)
    fsl = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(x[1:2].ravel()), 3), 4)
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (4, 3))
    ext = pa.ExtensionArray.from_storage(
        tensor_type, pa.FixedSizeListArray.from_arrays(pa.array(x[2:].ravel()), 12))
    values = [json.dumps({"grid": x[0].tolist()}).encode(),
              encode_arrow(pa.table({"grid": fsl})), encode_arrow(pa.table({"grid": ext}))]
    dec = decode_inputs(batch(values), (GRID,))
    assert not dec.bad
    np.testing.assert_array_equal(dec.arrays["grid"], x)


def test_wrong_tensor_shapes_and_dtypes_are_refused_row_by_row() -> None:
    ok = np.ones((4, 3)).tolist()
    values = [json.dumps({"grid": ok}).encode(),
              json.dumps({"grid": np.ones((3, 3)).tolist()}).encode(),
              json.dumps({"grid": [["a", "b", "c"]] * 4}).encode(),
              json.dumps({"grid": [[1, 2, 3]] * 3 + [[1, 2]]}).encode(),
              json.dumps({"grid": [1] * 12}).encode()]
    dec = decode_inputs(batch(values), (GRID,))
    why = reasons(dec)
    assert dec.message.tolist() == [0]
    assert set(why) == {1, 2, 3, 4}
    assert all("'grid'" in w for w in why.values())
    assert "wrong tensor shape" in why[1] and "(4, 3)" in why[1]
    assert "dtype" in why[2]
    assert "wrong tensor shape" in why[3]


def test_text_over_the_models_length_and_numbers_by_name() -> None:
    values = [json.dumps({"text": "good movie"}).encode(),
              json.dumps({"text": " ".join(["word"] * 9)}).encode(),
              json.dumps({"text": 5}).encode()]
    dec = decode_inputs(batch(values), (TEXT,))
    why = reasons(dec)
    assert dec.arrays["text"].tolist() == ["good movie"]
    assert why[1] == "input 'text': text of 9 tokens is over the model's 8"
    assert "expected a string" in why[2]
    two = decode_inputs(batch([json.dumps({"age": 3, "size": 1.5}).encode(),
                               json.dumps({"age": "x", "size": 1}).encode()]), (META,))
    np.testing.assert_array_equal(two.arrays["meta"], [[3, 1.5]])
    assert "field 'age' is not a number" in reasons(two)[1]


def test_arrow_decompression_bomb_is_measured_from_metadata_and_refused() -> None:
    n = 4 << 20  # 16 MiB of float32 zeros: a few KB compressed
    table = pa.table({"grid": pa.array(np.zeros(n, np.float32))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    bomb = sink.getvalue().to_pybytes()
    assert len(bomb) < 64 * 1024
    assert read_meta(bomb).stored_bytes >= 4 * n and read_meta(bomb).rows == n
    assert read_meta(encode_arrow(table)).stored_bytes >= 4 * n  # uncompressed: the same
    with pytest.raises(Exception, match=r"decompresses to .* over the limit of 1048576"):
        admit(bomb, caps=MessageCaps(max_rows=n, max_bytes=1 << 40), max_arrow_bytes=1 << 20)
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    dec = decode_inputs(batch([bomb]), (GRID,), InputLimits(max_arrow_bytes=1 << 20))
    assert "over the limit" in reasons(dec)[0]
    assert pool.bytes_allocated() - before < 1 << 20  # nothing was decompressed


def test_top_k_lists_the_best_labels_for_many_classes() -> None:
    many = ModelOutput(name="kind", kind=OutputKind.CLASSES, classes=tuple("abcdefghijkl"))
    few = ModelOutput(name="yn", kind=OutputKind.CLASSES, classes=("n", "y"))
    assert top_k_for(many, None) == 5 and top_k_for(few, None) == 0
    assert top_k_for(few, 3) == 2 and top_k_for(many, 0) == 0
    y = np.zeros((1, 12), np.float32)
    y[0, [4, 7, 1]] = [0.5, 0.3, 0.2]
    value = ModelOutput(name="w", kind=OutputKind.VALUES)
    src = Source([b"k"], ["t"], np.zeros(1, np.int32), np.array([7]), np.zeros(1, np.int32))
    (rec,) = rows([(many, y), (value, np.array([[2.5]], np.float32))], src, model_name="m",
                  model_version=3, top_k=3)
    assert rec["label"] == "e"
    assert [t["label"] for t in rec["top_k"]] == ["e", "h", "b"]
    assert rec["outputs"]["w"]["scores"] == [2.5]
    assert rec["source_offset"] == 7 and rec["model_version"] == 3


def test_batch_and_call_rows_follow_bytes_and_device_memory() -> None:
    img = 224 * 224 * 3 * 4  # 602 112 bytes a row
    assert sizing.batch_rows(batch_size=8192, row_bytes=img,
                             max_batch_bytes=64 << 20) == (64 << 20) // img == 111
    assert sizing.batch_rows(batch_size=8192, row_bytes=128, max_batch_bytes=64 << 20) == 8192
    # 16 GiB GPU, half usable, 32x the input for activations: 8 GiB / 19.3 MB = 445 -> 256
    assert sizing.call_rows(batch_rows=8192, row_bytes=img,
                            device_memory_bytes=16 << 30) == 256
    assert sizing.call_rows(batch_rows=100, row_bytes=img, device_memory_bytes=16 << 30) == 100
    assert sizing.call_rows(batch_rows=8192, row_bytes=img, device_memory_bytes=None) == 8192
    assert sizing.device_memory_bytes("gpu:0", None) == 16 << 30
    assert sizing.device_memory_bytes("cpu", None) is None
    assert sizing.device_memory_bytes("cpu", 1024) == 1 << 30
    assert signature_bytes((IMAGE, META)) == 8 * 8 * 4 + 2 * 4


def test_tokens_map_text_to_ids_padded_and_cut() -> None:
    vocab = ["good", "movie"]
    ids = tokens.encode_text(pa.array(["Good movie!", "bad   good movie good", None]), vocab,
                             max_length=3)
    assert ids.tolist() == [[2, 3, 0], [1, 2, 3], [0, 0, 0]]
    assert tokens.token_counts(pa.array(["a b  c", ""])).tolist() == [3, 0]


def test_two_models_with_one_signature_score_one_decoded_batch(tmp_path: Path) -> None:
    from headrace.scorers.engine.core import score_inputs
    from headrace.scorers.engine.models import load_model

    sm.tf_digits(tmp_path, "a", seed=1)
    sm.tf_digits(tmp_path, "b", seed=2)
    a, b = (load_model(root=tmp_path, name=n, alias="production", device="cpu", max_batch=64)
            for n in ("a", "b"))
    assert not a.tabular and a.signature == b.signature
    png = [encode(i) for i in digits(6)]
    dec = decode_inputs(batch(png, [[(hdr.CONTENT_TYPE, b"image/png")]] * 6), a.signature)
    ya, ea = score_inputs(a, dec.arrays)
    yb, eb = score_inputs(b, dec.arrays)
    assert not ea and not eb
    assert ya[0].shape == yb[0].shape == (6, 10)
    assert not np.allclose(ya[0], yb[0])  # two models, one decoding
    # A model with another signature cannot take it: decode again for that one.
    sm.tf_tensor(tmp_path, "c")
    c = load_model(root=tmp_path, name="c", alias="production", device="cpu", max_batch=64)
    assert c.signature != dec.signature


def test_an_undecodable_image_gets_the_same_reason_every_time() -> None:
    from headrace.store.images import _short

    def reason() -> str:
        try:
            Image.open(io.BytesIO(b"not an image"))
        except Exception as exc:
            return _short(exc)
        raise AssertionError("Pillow opened garbage")

    first = reason()
    assert first == reason()
    assert "0x" not in first and "image" in first


def test_json_predictions_keep_each_records_key_and_topic_whether_or_not_rows_drop(
        tmp_path: Path) -> None:
    """The formatter takes the batch's own key list when every message is one scored row, and
    per-row lists otherwise: each prediction names its own record either way."""
    from headrace.scorers.engine.core import ScoringCore
    from headrace.scorers.engine.models import load_model

    sm.tf_text(tmp_path, "t")
    model = load_model(root=tmp_path, name="t", alias="production", device="cpu", max_batch=64)
    texts = ["good movie", "awful plot", " ".join(["the"] * 9), "fine", "great the movie"]
    good = batch([json.dumps({"text": t}).encode() for t in texts[:2] + texts[3:]])
    out = ScoringCore().score(good, model)
    assert out.json_keys == good.keys and not out.letters
    out.json_keys.append(None)  # the outputs' own list (a canary merge extends it)
    assert len(good.keys) == 4
    recs = [json.loads(v) for v in out.json_values]
    assert [r["key"] for r in recs] == ["k0", "k1", "k2", "k3"]
    assert [r["source_offset"] for r in recs] == [0, 1, 2, 3]
    # One text over the model's 8 tokens: its row drops, the others keep their own keys.
    mixed = batch([json.dumps({"text": t}).encode() for t in texts])
    mixed.topics[3] = "data.other"
    out = ScoringCore().score(mixed, model)
    recs = [json.loads(v) for v in out.json_values]
    assert out.json_keys == [b"k0", b"k1", b"k3", b"k4"]
    assert [r["key"] for r in recs] == ["k0", "k1", "k3", "k4"]
    assert [r["source_topic"] for r in recs] == ["data.t", "data.t", "data.other", "data.t"]
    assert out.json_messages().tolist() == [0, 1, 3, 4]
    assert [ltr.record.offset for ltr in out.letters] == [2]
