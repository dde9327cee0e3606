"""The one image decode: a seeded corpus of random images in every mode Pillow reads goes through
the trainer's path (``trainers.inputs``) and the scorer's (JSON base64 and Arrow binary through
``scorers.wire.inputs``) to identical arrays, for 1-, 3- and 4-channel models; and each mode's rule
(16-bit scaled, float 0..1, palette, alpha dropped, CMYK, EXIF orientation) holds on pixels
computed by hand."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from headrace.codecs import training_images as trainer_images
from headrace.scorers.wire.inputs import decode_inputs
from headrace.store import images
from headrace.store.signature import InputKind, ModelInput
from headrace.streams.codecs import encode_arrow
from headrace.streams.consuming import RawBatch
from headrace.trainers.inputs import Inputs

H, W = 6, 5


def _save(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _u8(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(0, 256, (H, W, *shape), dtype=np.uint8).squeeze()


MAKERS: dict[str, Callable[[np.random.Generator], bytes]] = {
    "1": lambda r: _save(Image.fromarray(_u8(r) > 127), "PNG"),
    "L": lambda r: _save(Image.fromarray(_u8(r), "L"), "PNG"),
    "LA": lambda r: _save(Image.fromarray(_u8(r, 2), "LA"), "PNG"),
    "RGB": lambda r: _save(Image.fromarray(_u8(r, 3), "RGB"), "PNG"),
    "RGBA": lambda r: _save(Image.fromarray(_u8(r, 4), "RGBA"), "PNG"),
    "P": lambda r: _save(Image.fromarray(_u8(r, 3), "RGB").quantize(7), "PNG"),
    "P+transparency": lambda r: _save(Image.fromarray(_u8(r, 3), "RGB").quantize(5), "PNG",
                                      transparency=0),
    "I;16": lambda r: _save(Image.fromarray(r.integers(0, 65536, (H, W), dtype=np.uint16),
                                            ), "PNG"),
    "I": lambda r: _save(Image.fromarray(r.integers(-500, 70000, (H, W), dtype=np.int32), "I"),
                         "TIFF"),
    "F": lambda r: _save(Image.fromarray(r.uniform(-0.2, 1.2, (H, W)).astype(np.float32), "F"),
                         "TIFF"),
    "CMYK": lambda r: _save(Image.fromarray(_u8(r, 4), "CMYK"), "JPEG", quality=95),
    "JPEG-L": lambda r: _save(Image.fromarray(_u8(r), "L"), "JPEG", quality=90),
    "EXIF-rotated": lambda r: _save(Image.fromarray(_u8(r, 3), "RGB"), "JPEG",
                                    exif=_orientation(6)),
}


def _orientation(value: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif


def corpus(seed: int, per_mode: int = 3) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    return [(mode, make(rng)) for mode, make in MAKERS.items() for _ in range(per_mode)]


def _image_input(channels: int) -> ModelInput:
    return ModelInput(name="image", kind=InputKind.IMAGE, height=4, width=7, channels=channels)


def _raw_batch(values: list[bytes]) -> RawBatch:
    n = len(values)
    return RawBatch(values, [f"k{i}".encode() for i in range(n)], ["data.t"] * n,
                    np.zeros(n, np.int32), np.arange(n, dtype=np.int64),
                    np.zeros(n, np.int64), [None] * n)


def test_the_corpus_holds_every_mode_it_names() -> None:
    modes = {images.header(blob)[3] for _, blob in corpus(0, 1)}
    assert {"1", "L", "LA", "RGB", "RGBA", "P", "I;16", "I", "F", "CMYK"} <= modes


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_trainer_and_scorer_read_every_mode_to_identical_arrays(channels: int,
                                                                seed: int) -> None:
    blobs = [b for _, b in corpus(seed)]
    inp = _image_input(channels)
    trained = Inputs({"image": np.array(blobs, dtype=object)}, (inp,)).arrays()["image"]
    assert trained.shape == (len(blobs), 4, 7, channels) and trained.dtype == np.float32

    as_json = [json.dumps({"image": base64.b64encode(b).decode()}).encode() for b in blobs]
    as_arrow = [encode_arrow(pa.table({"image": pa.array(blobs, pa.binary())}))]
    for values in (as_json, as_arrow):
        dec = decode_inputs(_raw_batch(values), (inp,))
        assert not dec.bad
        np.testing.assert_array_equal(dec.arrays["image"], trained)


def test_a_channel_mismatch_is_converted_by_the_rule_and_named() -> None:
    grey = np.arange(30, dtype=np.uint8).reshape(H, W) * 8
    spec = images.ImageSpec(H, W, 3)
    out = images.decode_one(_save(Image.fromarray(grey, "L"), "PNG"), spec)
    assert out.conversion == "L->RGB"
    assert (out.pixels == grey[..., None]).all()  # grey replicated into R, G and B
    rgb = images.decode_one(_save(Image.fromarray(np.dstack([grey] * 3), "RGB"), "PNG"), spec)
    assert rgb.conversion is None
    rgba = np.dstack([grey, grey, grey, np.full_like(grey, 7)])
    dropped = images.decode_one(_save(Image.fromarray(rgba, "RGBA"), "PNG"), spec)
    assert dropped.conversion == "RGBA->RGB" and (dropped.pixels == grey[..., None]).all()
    batch = images.decode_batch([_save(Image.fromarray(grey, "L"), "PNG")] * 5, spec)
    assert batch.conversions == {"L->RGB": 5} and not batch.errors


def test_sixteen_bit_grey_is_scaled_to_0_255_not_clipped() -> None:
    v = np.array([[0, 257, 32767, 32768, 65279, 65535]], np.uint16)
    out = images.decode_one(_save(Image.fromarray(v), "PNG"), images.ImageSpec(1, 6, 1))
    assert out.pixels.ravel().tolist() == [0, 1, 127, 128, 254, 255]
    assert out.conversion is None  # still grey for a grey model
    wide = np.array([[-5, 0, 65535, 99999]], np.int32)
    got = images.decode_one(_save(Image.fromarray(wide, "I"), "TIFF"), images.ImageSpec(1, 4, 1))
    assert got.pixels.ravel().tolist() == [0, 0, 255, 255]


def test_float_grey_is_read_as_0_to_1_intensities() -> None:
    f = np.array([[-1.0, 0.0, 0.5, 1.0, 3.0, np.nan]], np.float32)
    out = images.decode_one(_save(Image.fromarray(f, "F"), "TIFF"), images.ImageSpec(1, 6, 1))
    assert out.pixels.ravel().tolist() == [0, 0, 128, 255, 255, 0]


def test_palette_bilevel_and_cmyk_follow_their_rules() -> None:
    rng = np.random.default_rng(3)
    rgb = Image.fromarray(_u8(rng, 3), "RGB").quantize(4)
    out = images.decode_one(_save(rgb, "PNG"), images.ImageSpec(H, W, 3))
    np.testing.assert_array_equal(out.pixels, np.asarray(rgb.convert("RGB")))
    bits = _u8(rng) > 100
    out = images.decode_one(_save(Image.fromarray(bits), "PNG"), images.ImageSpec(H, W, 1))
    np.testing.assert_array_equal(out.pixels[..., 0], np.where(bits, 255, 0))
    cmyk = _save(Image.fromarray(_u8(rng, 4), "CMYK"), "JPEG", quality=95)
    out = images.decode_one(cmyk, images.ImageSpec(H, W, 3))
    want = np.asarray(Image.open(io.BytesIO(cmyk)).convert("RGB"))
    np.testing.assert_array_equal(out.pixels, want)


def test_exif_orientation_turns_the_image_upright() -> None:
    # Stored 2 rows x 3 columns with the top-left pixel white; orientation 6 means the camera
    # was turned: a viewer shows it 3 x 2, rotated 90 degrees clockwise.
    px = np.zeros((2, 3, 3), np.uint8)
    px[0, 0] = 255
    blob = _save(Image.fromarray(px, "RGB"), "PNG", exif=_orientation(6))
    out = images.decode_one(blob, images.ImageSpec(3, 2, 1)).pixels[..., 0]
    assert out.shape == (3, 2) and out[0, 1] == 255 and out.sum() == 255
    assert trainer_images.probe(blob)[:2] == (2, 3)  # the header's size, as stored


def test_a_bad_image_fails_the_trainer_with_one_line_and_the_scorer_for_its_row() -> None:
    good = MAKERS["L"](np.random.default_rng(0))
    inp = _image_input(1)
    with pytest.raises(trainer_images.ImageError, match="image 1 of the batch"):
        Inputs({"image": np.array([good, b"junk"], dtype=object)}, (inp,)).arrays()
    arrow = encode_arrow(pa.table({"image": pa.array([good, b"junk"], pa.binary())}))
    dec = decode_inputs(_raw_batch([arrow]), (inp,))
    assert dec.row.tolist() == [0] and len(dec.bad) == 1
