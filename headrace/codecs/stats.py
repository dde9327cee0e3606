"""What a kind learns on the training split; its codec turns it into layers (or constants)
inside the exported model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InputStats:
    mean: np.ndarray | None = None  # numeric: per column; tensor: one value
    std: np.ndarray | None = None
    vocabulary: tuple[str, ...] = ()
