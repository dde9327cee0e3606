"""The one image decode, for the trainer and the scorer alike: encoded bytes to 0..255 pixels.

A model sees exactly what it was trained on only if both sides read an image by the same
rules, so both call this module (it sits below trainers and scorers). One rule per mode
Pillow reads (docs/models.md, "Images"):

* EXIF orientation is applied first (a phone photo is read upright, as a viewer shows it).
* ``1`` (bilevel): 0 or 255. ``L``: as stored.
* ``I;16`` (16-bit grey PNG/TIFF) and ``I`` (32-bit integer grey, clipped to 0..65535): scaled
  by 255/65535 and rounded (65535 is 255; 16-bit is never clipped to its low byte).
* ``F`` (float grey): read as 0..1 intensities, times 255, rounded and clipped (NaN is 0).
* ``P``: its palette's colours (with alpha when the palette has transparency).
* ``CMYK`` (JPEG), ``YCbCr``, ``LAB``, ``HSV``: Pillow's conversion to RGB.
* Alpha (``LA``, ``PA``, ``RGBA``) into a model without alpha: dropped (the colour as stored, not
  composited, as Pillow's ``convert`` does and as earlier versions trained).

The image is then brought to the model's channels: 1 is grey (ITU-R 601-2 luma), 3 RGB (grey
replicated), 4 RGBA (opaque alpha added). When the image's own channels (``L``, ``LA``, ``RGB``
or ``RGBA`` after the rules above) differ from the model's, the decode says so (``Decoded.
conversion``, e.g. ``"L->RGB"``): the scorer counts and logs them, since a grey image fed to a
colour model (or the reverse) often scores worse. Last, a bilinear resize to the model's size.

Pillow releases the GIL while it decodes and resizes, so a thread pool decodes a batch on every
CPU the pod may use (its cgroup quota, ``core.cpus``); the header is read first (``Image.open``
is lazy) so the pixel limit is checked before any pixel is allocated. No framework is imported here.
"""

from __future__ import annotations

import io
import re
import warnings
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from headrace.core.cpus import cpu_limit

DEFAULT_MAX_PIXELS = 40_000_000  # a 6300 x 6300 photo; more is refused before decoding
# Our own limit (``ImageSpec.max_pixels``) is checked from the header first; Pillow's would
# refuse images an operator allowed.
Image.MAX_IMAGE_PIXELS = None
FORMATS = ("JPEG", "PNG", "TIFF", "BMP", "GIF", "WEBP")
MODES = {1: "L", 3: "RGB", 4: "RGBA"}
GREY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
_SIXTEEN_BIT = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})
_ORIENTATION = 0x0112

_pool: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(cpu_limit(), thread_name_prefix="image-decode")
    return _pool


@dataclass(frozen=True)
class ImageSpec:
    height: int
    width: int
    channels: int
    max_pixels: int = DEFAULT_MAX_PIXELS


class ImageRefused(ValueError):
    """An image that cannot become the model's input; the message names why."""


@dataclass(frozen=True)
class Decoded:
    """One image as uint8 (height, width, channels); ``conversion`` names a channel mismatch
    converted by the rules (``"L->RGB"``), None when the image had the model's channels."""

    pixels: np.ndarray
    conversion: str | None


@dataclass
class Batch:
    """float32 (n, h, w, c) pixels; the rows in ``errors`` could not be decoded (zeros there);
    ``conversions`` counts the channel mismatches converted, by conversion."""

    pixels: np.ndarray
    errors: dict[int, str] = field(default_factory=dict)
    conversions: Counter[str] = field(default_factory=Counter)


def header(data: bytes) -> tuple[str, int, int, str]:
    """(format, width, height, mode) from the header alone; nothing is decoded."""
    im = _open(data)
    return str(im.format), int(im.width), int(im.height), str(im.mode)


def _open(data: bytes) -> Image.Image:
    """The image, opened lazily (its header read, no pixel yet)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Image.open(io.BytesIO(data), formats=FORMATS)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError,
            Image.DecompressionBombError) as exc:
        raise ImageRefused(f"undecodable image ({_short(exc)})") from None


def natural_channels(mode: str) -> int:
    """The channels a dataset of such images gets by default: 1 for grey modes, else 3."""
    return 1 if mode in GREY_MODES else 3


def decode_one(data: bytes, spec: ImageSpec) -> Decoded:
    """One image by the module's rules, at the spec's size and channels."""
    im: Image.Image = _open(data)  # opened once: header checks, then the decode
    fmt, w, h = str(im.format), int(im.width), int(im.height)
    if w * h > spec.max_pixels:
        raise ImageRefused(f"image of {w}x{h} pixels is over the limit of {spec.max_pixels}")
    target = MODES.get(spec.channels)
    if target is None:
        raise ImageRefused(f"the model takes {spec.channels} channels; images have 1, 3 or 4")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = _upright(im)
            im = _eight_bit(im)
            conversion = None if im.mode == target else f"{im.mode}->{target}"
            if conversion is not None:
                im = im.convert(target)
            if im.size != (spec.width, spec.height):
                im = im.resize((spec.width, spec.height), Image.Resampling.BILINEAR)
            arr = np.asarray(im, np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageRefused(f"undecodable {fmt} image ({_short(exc)})") from None
    return Decoded(arr.reshape(spec.height, spec.width, spec.channels), conversion)


def decode_batch(images: Sequence[bytes], spec: ImageSpec) -> Batch:
    """Every image decoded (in threads for four or more); a bad image costs its row only."""
    out = Batch(np.zeros((len(images), spec.height, spec.width, spec.channels), np.float32))
    if not images:
        return out
    conversions: list[str | None] = [None] * len(images)

    def one(i: int) -> None:
        try:
            d = decode_one(images[i], spec)
            out.pixels[i] = d.pixels
            conversions[i] = d.conversion
        except ImageRefused as exc:
            out.errors[i] = str(exc)
        except Exception as exc:  # a hostile file may trip any decoder bug: its row only
            out.errors[i] = f"undecodable image ({type(exc).__name__}: {_short(exc)})"

    if len(images) < 4:
        for i in range(len(images)):
            one(i)
    else:
        list(_threads().map(one, range(len(images))))
    out.conversions.update(c for c in conversions if c is not None)
    return out


def _upright(im: Image.Image) -> Image.Image:
    """EXIF orientation applied (only images that carry a non-default one pay for it)."""
    try:
        orientation = im.getexif().get(_ORIENTATION, 1)
    except (OSError, ValueError, SyntaxError):
        return im
    if orientation in (None, 1):
        return im
    return ImageOps.exif_transpose(im)


def _eight_bit(im: Image.Image) -> Image.Image:
    """The image as ``L``, ``LA``, ``RGB`` or ``RGBA`` by the per-mode rules above."""
    mode = im.mode
    if mode in ("L", "LA", "RGB", "RGBA"):
        return im
    if mode in _SIXTEEN_BIT:
        a = np.asarray(im).astype(np.int64)
        a = np.clip(a, 0, 65535)
        return Image.fromarray(((a * 255 + 32767) // 65535).astype(np.uint8), "L")
    if mode == "F":
        f = np.nan_to_num(np.asarray(im, np.float32), nan=0.0, posinf=1.0, neginf=0.0)
        return Image.fromarray(np.clip(np.rint(f * 255), 0, 255).astype(np.uint8), "L")
    if mode == "1":
        return im.convert("L")
    if mode == "P":
        return im.convert("RGBA" if "transparency" in im.info else "RGB")
    if mode == "PA":
        return im.convert("RGBA")
    return im.convert("RGB")  # CMYK, YCbCr, LAB, HSV, RGBX, ...


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # Pillow names its buffer object ("<_io.BytesIO object at 0x7f...>"): a reason must be
    # the same for the same bytes, so the address goes.
    return _OBJECT_AT.sub("the image bytes", text)[:160]


_OBJECT_AT = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
