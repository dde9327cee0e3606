"""Encoded images (JPEG/PNG) to one float32 NHWC batch, decoded and resized in threads.

Pillow, not the framework's ops: it reads an image's header (``Image.open`` is lazy) so the
dimensions are checked against the pixel limit *before* any pixel is allocated, which
``tf.io.decode_image`` cannot do; it works the same for both frameworks (MXNet has no PNG
decoder of its own), and this module stays free of framework imports (the layering contract).
Pillow releases the GIL while it decodes and resizes, so a small thread pool decodes a batch on
every core while the scoring thread waits: the per-image Python cost is a few microseconds, the
pixels are never touched by Python.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

DEFAULT_MAX_PIXELS = 40_000_000  # a 6300 x 6300 photo; more is refused before decoding
# Our own limit (``ImageSpec.max_pixels``) is checked from the header first; Pillow's would
# refuse images an operator allowed.
Image.MAX_IMAGE_PIXELS = None
FORMATS = ("JPEG", "PNG")
MODES = {1: "L", 3: "RGB", 4: "RGBA"}

_pool: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1)),
                                   thread_name_prefix="image-decode")
    return _pool


@dataclass(frozen=True)
class ImageSpec:
    height: int
    width: int
    channels: int
    max_pixels: int = DEFAULT_MAX_PIXELS


class ImageRefused(ValueError):
    """An image that cannot become the model's input; the message names why."""


def header(data: bytes) -> tuple[str, int, int, str]:
    """(format, width, height, mode) from the header alone; nothing is decoded."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = Image.open(io.BytesIO(data), formats=FORMATS)
            return str(im.format), int(im.width), int(im.height), str(im.mode)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError,
            Image.DecompressionBombError) as exc:
        raise ImageRefused(f"undecodable image ({_short(exc)})") from None


def decode_one(data: bytes, spec: ImageSpec) -> np.ndarray:
    """One image as float32 (height, width, channels), 0..255."""
    fmt, w, h, mode = header(data)
    if w * h > spec.max_pixels:
        raise ImageRefused(f"image of {w}x{h} pixels is over the limit of {spec.max_pixels}")
    target = MODES.get(spec.channels)
    if target is None:
        raise ImageRefused(f"the model takes {spec.channels} channels; images have 1, 3 or 4")
    if spec.channels == 1 and mode not in ("L", "1", "P", "I", "I;16", "LA"):
        # Colour into a one-channel model would silently change what it sees.
        raise ImageRefused(f"image has mode {mode} (colour); the model takes 1 channel")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im: Image.Image = Image.open(io.BytesIO(data), formats=FORMATS)
            if im.mode in ("I", "I;16"):
                im = im.point(lambda v: v * (1 / 256)).convert("L")
            im = im.convert(target)
            if im.size != (spec.width, spec.height):
                im = im.resize((spec.width, spec.height), Image.Resampling.BILINEAR)
            arr = np.asarray(im, np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageRefused(f"undecodable {fmt} image ({_short(exc)})") from None
    return arr.reshape(spec.height, spec.width, spec.channels)


def decode_batch(images: Sequence[bytes], spec: ImageSpec
                 ) -> tuple[np.ndarray, dict[int, str]]:
    """float32 (n, h, w, c) and the reasons of the images that could not be decoded (their
    rows are zeros)."""
    out = np.zeros((len(images), spec.height, spec.width, spec.channels), np.float32)
    errors: dict[int, str] = {}
    if not images:
        return out, errors

    def one(i: int) -> None:
        try:
            out[i] = decode_one(images[i], spec)
        except ImageRefused as exc:
            errors[i] = str(exc)
        except Exception as exc:  # a hostile file may trip any decoder bug: its row only
            errors[i] = f"undecodable image ({type(exc).__name__}: {_short(exc)})"

    if len(images) < 4:
        for i in range(len(images)):
            one(i)
    else:
        list(_threads().map(one, range(len(images))))
    return out, errors




def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # Pillow names its buffer object ("<_io.BytesIO object at 0x7f...>"): a reason must be
    # the same for the same bytes, so the address goes.
    return _OBJECT_AT.sub("the image bytes", text)[:160]


_OBJECT_AT = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
