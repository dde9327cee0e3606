"""Short human summaries of big values (encoded images, tensors) for ``headrace tail``:
``<image/png 8x8 412 B>``, ``<tensor float32 (8, 8)>``, instead of kilobytes of base64 or
numbers. Image sizes come from the header bytes alone (PNG IHDR, JPEG SOF), no decoder."""

from __future__ import annotations

import binascii
import struct
from typing import Any

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
TENSOR_MIN = 16  # lists with more numbers than this are summarised
_B64_HEADS = ("iVBORw0KGgo", "/9j/")  # base64 of the PNG and JPEG magic bytes


def image_type(data: bytes) -> str | None:
    """``image/png`` / ``image/jpeg`` from the magic bytes, else None."""
    if data[:8] == PNG_MAGIC:
        return "image/png"
    if data[:3] == JPEG_MAGIC:
        return "image/jpeg"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG or JPEG header, or None."""
    try:
        if data[:8] == PNG_MAGIC and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return int(w), int(h)
        if data[:3] == JPEG_MAGIC:
            pos = 2
            while pos + 9 < len(data):
                if data[pos] != 0xFF:
                    return None
                marker = data[pos + 1]
                length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
                if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB,
                              0xCD, 0xCE, 0xCF):
                    h, w = struct.unpack(">HH", data[pos + 5:pos + 9])
                    return int(w), int(h)
                pos += 2 + length
    except (struct.error, IndexError):
        return None
    return None


def describe_image(data: bytes, *, base64: bool = False) -> str | None:
    ctype = image_type(data)
    if ctype is None:
        return None
    size = image_size(data)
    dims = f" {size[0]}x{size[1]}" if size else ""
    return f"<{ctype}{dims} {len(data)} B{' base64' if base64 else ''}>"


def _shape(value: Any) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of a rectangular nested list of numbers, else None."""
    shape: list[int] = []
    level = value
    while isinstance(level, list):
        shape.append(len(level))
        if not level:
            break
        level = level[0]
    flat: list[Any] = value
    for _ in shape[1:]:
        if not all(isinstance(v, list) and len(v) == len(flat[0]) for v in flat):
            return None
        flat = [x for v in flat for x in v]
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in flat):
        return None
    return tuple(shape), ("float32" if any(isinstance(x, float) for x in flat) else "int64")


def summarise(value: Any) -> Any:
    """The value with images and big tensors replaced by their one-line summaries."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return describe_image(data) or f"<{len(data)} B>"
    if isinstance(value, str):
        if len(value) > 64 and value.startswith(_B64_HEADS):
            try:
                data = binascii.a2b_base64(value)
            except (binascii.Error, ValueError):
                return value
            return describe_image(data, base64=True) or value
        return value
    if isinstance(value, dict):
        return {k: summarise(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and isinstance(value[0], list | int | float) and not isinstance(value[0], bool):
            got = _shape(value)
            if got is not None:
                shape, dtype = got
                count = 1
                for s in shape:
                    count *= s
                if count > TENSOR_MIN:
                    return f"<tensor {dtype} {shape}>"
        return [summarise(v) for v in value]
    return value
