"""The trainer's side of the one image decode (``headrace.store.images``): the same rules as
the scorer, so a model is trained on exactly the pixels it will be scored on. A bad image fails
the job (permanent: the dataset must change), and channel conversions are logged once a batch.
"""

from __future__ import annotations

import logging

import numpy as np

from headrace.core.errors import PermanentError
from headrace.store import images

log = logging.getLogger(__name__)


class ImageError(PermanentError):
    """An image could not be decoded."""


def probe(blob: bytes) -> tuple[int, int, int]:
    """(height, width, channels) of an encoded image: grey images have 1 channel, others 3."""
    try:
        _, w, h, mode = images.header(blob)
    except images.ImageRefused as exc:
        raise ImageError(f"not a decodable image: {exc}") from None
    return h, w, images.natural_channels(mode)


def decode(blobs: np.ndarray | list[bytes], *, height: int, width: int, channels: int
           ) -> np.ndarray:
    """Decode and resize (bilinear) every image: ``float32 (n, height, width, channels)``."""
    batch = images.decode_batch(list(blobs), images.ImageSpec(height, width, channels))
    if batch.errors:
        i = min(batch.errors)
        raise ImageError(f"image {i} of the batch is not decodable: {batch.errors[i]}")
    if batch.conversions:
        log.warning("images converted to the model's %d channel(s): %s", channels,
                    dict(batch.conversions))
    return batch.pixels
