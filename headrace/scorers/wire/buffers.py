"""Feature matrices a framework can read in place.

TensorFlow copies a NumPy array it is given (~5 ms a 65 536 x 32 batch on this box, most of it
page faults on the fresh copy), but shares one handed over through DLPack, provided the memory is
64-byte aligned (Eigen's widest; TensorFlow aborts the process on a misaligned one). NumPy only
guarantees 16 bytes, so the decoder allocates its matrix here. Its memory is reused from batch
to batch: faulting in a fresh 8 MB matrix cost more than filling it.
"""

from __future__ import annotations

import sys

import numpy as np

ALIGN = 64


class Scratch:
    """One aligned buffer, lent again only once no matrix cut from it is referenced (every
    view, and a tensor sharing it through DLPack, holds a reference to the buffer)."""

    def __init__(self) -> None:
        self._raw: np.ndarray | None = None

    def matrix(self, rows: int, cols: int) -> np.ndarray:
        size = rows * cols * 4
        raw = self._raw
        # Referenced by self._raw, by ``raw`` and by getrefcount's argument: nothing else.
        if raw is None or raw.nbytes < size + ALIGN or sys.getrefcount(raw) > 3:
            raw = self._raw = np.empty(size + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        out: np.ndarray = raw[start:start + size].view(np.float32).reshape(rows, cols)
        return out


def is_aligned(x: np.ndarray) -> bool:
    return bool(x.flags.c_contiguous) and x.ctypes.data % ALIGN == 0
