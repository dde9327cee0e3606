"""A digest of a model's weights that every gang member logs, to prove they agree."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import numpy as np

LINE = "weights checksum"
_LINE_RE = re.compile(rf"\[(w\d+)\].*{LINE} ([0-9a-f]{{16}})")


def checksum(arrays: Iterable[np.ndarray]) -> str:
    """Order- and name-independent (the chief's export renames parameters): a digest of the
    sorted digests of each array's float32 bytes."""
    parts = sorted(hashlib.sha256(np.ascontiguousarray(a, np.float32).tobytes()).digest()
                   for a in arrays)
    return hashlib.sha256(b"".join(parts)).hexdigest()[:16]


def checksums_in_log(text: str) -> dict[str, str]:
    """``{"w0": digest, "w1": digest}`` from a job log's last lines per worker."""
    return {m.group(1): m.group(2) for m in _LINE_RE.finditer(text)}
