"""A batch of binary records read a field at a time: every record's read position is one
element of a numpy vector, and each read advances all of them at once (a varint is at most ten
vectorised steps, a fixed-width value one gather or a strided view). No Python object per
record. Reads past a record's end stay inside the buffer (it is padded) and mark that record
bad; so does a record whose reads do not end exactly at its end (``finish``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_PAD = 16  # zero bytes after the last body: a read past a record's end stays in the buffer


class Positions:
    """Every body's read position, advanced a field at a time."""

    def __init__(self, values: Sequence[bytes], skip: int) -> None:
        n = len(values)
        lengths = np.fromiter(map(len, values), np.int64, n)
        self.end = np.cumsum(lengths)
        self.pos = self.end - lengths + skip
        self.buf = np.frombuffer(b"".join(values) + bytes(_PAD), np.uint8)
        self.last = len(self.buf) - _PAD  # clamp reads here: a bad body never reads outside
        self.bad = np.zeros(n, bool)

    def varint(self, rows: np.ndarray, zigzag: bool = True) -> np.ndarray:
        """Varints at ``rows``' positions as int64: zigzag-decoded (Avro int and long,
        Protobuf sint) or as they are (Protobuf's other varints, two's complement)."""
        p = np.minimum(self.pos[rows], self.last)
        acc = np.zeros(len(rows), np.uint64)
        size = np.zeros(len(rows), np.int64)
        active = np.arange(len(rows))
        for k in range(10):
            b = self.buf[p[active] + k]
            acc[active] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            more = (b & 0x80) != 0
            size[active[~more]] = k + 1
            active = active[more]
            if not len(active):
                break
        if len(active):
            self.bad[rows[active]] = True
            size[active] = 10
        self.pos[rows] = p + size
        if not zigzag:
            return acc.view(np.int64)
        return ((acc >> np.uint64(1)) ^ (np.uint64(0) - (acc & np.uint64(1)))).view(np.int64)

    def fixed(self, rows: np.ndarray, width: int) -> np.ndarray:
        p = np.minimum(self.pos[rows], self.last)
        self.pos[rows] = p + width
        return self.buf[p[:, None] + np.arange(width)]

    def floats(self, rows: np.ndarray, widths: Sequence[int]) -> list[np.ndarray]:
        """A run of little-endian float / double fields (4 or 8 bytes), each as a contiguous
        array: read in place as strided views when the rows sit equally spaced (records of one
        length), else one gather for the whole run."""
        total = sum(widths)
        p = np.minimum(self.pos[rows], self.last)
        self.pos[rows] = p + total
        m = len(rows)
        offsets = np.cumsum([0, *widths[:-1]]).tolist()
        stride = int(p[1] - p[0]) if m > 1 else total
        if m and stride >= total and int(p[0]) + (m - 1) * stride + total <= len(self.buf) and (
                m == 1 or bool((np.diff(p) == stride).all())):
            return [np.ascontiguousarray(np.ndarray((m,), f"<f{w}", self.buf, int(p[0]) + o,
                                                    (stride,)))
                    for w, o in zip(widths, offsets, strict=True)]
        block = self.buf[p[:, None] + np.arange(total)]
        return [np.ascontiguousarray(block[:, o:o + w]).view(f"<f{w}").reshape(-1)
                for w, o in zip(widths, offsets, strict=True)]

    def blobs(self, rows: np.ndarray, keep: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """Length-prefixed bytes at ``rows``: (lengths, the bytes back to back) or None."""
        size = self.varint(rows)
        p = self.pos[rows]
        wrong = (size < 0) | (size > self.end[rows] - p)
        if wrong.any():
            self.bad[rows[wrong]] = True
            size = np.where(wrong, 0, size)
        self.pos[rows] = p + size
        if not keep:
            return None
        starts = np.cumsum(size) - size
        idx = np.repeat(p - starts, size) + np.arange(int(size.sum()), dtype=np.int64)
        return size, self.buf[idx]

    def finish(self) -> np.ndarray:
        """The records that do not decode: a bad read, or bytes short or left over."""
        self.bad |= self.pos != self.end
        return self.bad
