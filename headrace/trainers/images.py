"""Image decoding for the input pipeline: encoded JPEG/PNG bytes to float32 NHWC 0..255.

One Pillow decode + resize per image (C code; never a Python loop over pixels), a batch at a
time, so a dataset of encoded images is decoded only as its batches are drawn.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, UnidentifiedImageError

from headrace.core.errors import PermanentError


class ImageError(PermanentError):
    """An image could not be decoded."""


def probe(blob: bytes) -> tuple[int, int, int]:
    """(height, width, channels) of an encoded image: grey images have 1 channel, others 3."""
    try:
        with Image.open(io.BytesIO(blob)) as im:
            w, h = im.size
            return h, w, 1 if im.mode in ("1", "L", "I", "I;16", "F", "LA") else 3
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageError(f"not a decodable image: {exc}") from None


def decode(blobs: np.ndarray | list[bytes], *, height: int, width: int, channels: int
           ) -> np.ndarray:
    """Decode and resize (bilinear) every image: ``float32 (n, height, width, channels)``."""
    out = np.empty((len(blobs), height, width, channels), dtype=np.uint8)
    mode = "L" if channels == 1 else "RGB"
    for i, blob in enumerate(blobs):
        try:
            with Image.open(io.BytesIO(blob)) as im:
                img = im.convert(mode)
                if img.size != (width, height):
                    img = img.resize((width, height), Image.Resampling.BILINEAR)
                out[i] = np.asarray(img).reshape(height, width, channels)
        except (UnidentifiedImageError, OSError, ValueError, TypeError) as exc:
            raise ImageError(f"image {i} of the batch is not decodable: {exc}") from None
    return out.astype(np.float32)
