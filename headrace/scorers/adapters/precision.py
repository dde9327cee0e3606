"""Reduced precision for torch models (``--precision fp32|bf16|fp16``), and how often it agrees
with fp32. Imports no framework.

The choice is one per process, like the runtime (``select``). A torch adapter running bf16 or
fp16 checks itself on live traffic: every call until ``FIRST_ROWS`` rows were compared, then
every ``EVERY``-th, up to ``SAMPLE_ROWS`` rows of the call are also run in fp32 and their labels
(argmax of the first output; classifiers only) compared. ``Agreement`` keeps the counts per
model version; the scorer exports the share on ``/metrics``
(``headrace_scorer_precision_agreement``). Warm-up calls (zeros) are not counted: ``reset``
after warming.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from headrace.core.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
DEFAULT = "fp32"
SAMPLE_ROWS = 64
EVERY = 10
FIRST_ROWS = 256  # every call is sampled until this many rows were compared
_chosen: list[str] = []


def select(precision: str) -> str:
    """This process's precision (once); ``ConfigError`` for an unknown or second one."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    if _chosen and _chosen[0] != precision:
        raise ConfigError(f"this process scores in {_chosen[0]}; {precision} needs a process "
                          f"of its own")
    if not _chosen:
        _chosen.append(precision)
    return precision


def precision() -> str:
    return _chosen[0] if _chosen else DEFAULT


class Agreement:
    """Per model version (``NAME:VERSION``): rows compared with fp32, and how many had fp32's
    label."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, int]] = {}

    def observe(self, ref: str, same: int, rows: int) -> None:
        with self._lock:
            s, n = self._counts.get(ref, (0, 0))
            self._counts[ref] = (s + same, n + rows)

    def reset(self, ref: str) -> None:
        with self._lock:
            self._counts.pop(ref, None)

    def rows(self, ref: str) -> int:
        return self._counts.get(ref, (0, 0))[1]

    def share(self, ref: str) -> float:
        """Share of compared rows with fp32's label; NaN before any comparison."""
        same, rows = self._counts.get(ref, (0, 0))
        return same / rows if rows else float("nan")


AGREEMENT = Agreement()


def checked(ref: str, reduced: Callable[[list[np.ndarray]], list[np.ndarray]],
            exact: Callable[[list[np.ndarray]], list[np.ndarray]]
            ) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """``reduced``, which also runs a sample of its calls through ``exact`` and counts the rows
    whose label agrees (``AGREEMENT``). Both take and give arrays by position."""
    calls = [0]

    def call(args: list[np.ndarray]) -> list[np.ndarray]:
        ys = reduced(args)
        if len(args[0]) and (calls[0] % EVERY == 0 or AGREEMENT.rows(ref) < FIRST_ROWS):
            k = min(SAMPLE_ROWS, len(args[0]))
            want = exact([a[:k] for a in args])[0]
            if want.ndim == 2 and want.shape[1] > 1:  # labels: a classifier's first output
                same = int(np.sum(want.argmax(1) == ys[0][:k].argmax(1)))
                AGREEMENT.observe(ref, same, k)
        calls[0] += 1
        return ys

    return call
