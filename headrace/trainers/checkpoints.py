"""Checkpoints under ``jobs/<id>/checkpoints/<step>/``: complete or invisible.

Write protocol:

1. The backend writes weights and optimiser state into ``checkpoints/.tmp-<step>-<rand>/``.
2. ``state.json`` (epoch, batch within the epoch, global step) is written and fsynced.
3. ``COMPLETE`` is written last, then the directory is renamed to ``checkpoints/<step>``.

Readers take the highest-numbered directory that holds ``COMPLETE``; temp directories and
incomplete ones (a kill between 1 and 3) are ignored and swept. Steps only grow: a resumed job
continues from the checkpoint's step.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from headrace.core.errors import RetriableError
from headrace.store.dfs import fsync_dir, write_atomic

COMPLETE = "COMPLETE"
STATE = "state.json"
KEEP = 3


@dataclass(frozen=True)
class CheckpointState:
    step: int  # optimiser steps done in total
    epoch: int  # the epoch in progress (or the next one when batch == 0)
    batch: int  # batches of ``epoch`` already done
    loss: float | None = None


def save(ckdir: Path, state: CheckpointState, write: Callable[[Path], None]) -> Path:
    ckdir.mkdir(parents=True, exist_ok=True)
    final = ckdir / str(state.step)
    if (final / COMPLETE).exists():
        return final  # the same step saved twice (epoch end right after a step checkpoint)
    tmp = ckdir / f".tmp-{state.step}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        write_atomic(tmp / STATE, json.dumps(asdict(state)).encode())
        write_atomic(tmp / COMPLETE, b"ok\n")
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # a framework's own I/O error (e.g. MXNetError): one line
        shutil.rmtree(tmp, ignore_errors=True)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        raise RetriableError(f"checkpoint at step {state.step} not written: {first}") from None
    if final.exists():  # an incomplete leftover of a killed attempt
        shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    fsync_dir(ckdir)
    _prune(ckdir)
    return final


def latest(ckdir: Path) -> tuple[Path, CheckpointState] | None:
    """The newest complete checkpoint, or None."""
    if not ckdir.is_dir():
        return None
    steps = sorted((int(p.name) for p in ckdir.iterdir() if p.name.isdecimal()), reverse=True)
    for s in steps:
        path = ckdir / str(s)
        if (path / COMPLETE).is_file():
            try:
                data = json.loads((path / STATE).read_text())
                return path, CheckpointState(**data)
            except (OSError, ValueError, TypeError):
                continue
    return None


def sweep(ckdir: Path) -> None:
    """Remove temp and incomplete directories left by a killed attempt."""
    if not ckdir.is_dir():
        return
    for p in ckdir.iterdir():
        if p.name.startswith(".tmp-") or (p.name.isdecimal() and not (p / COMPLETE).exists()):
            shutil.rmtree(p, ignore_errors=True)


def _prune(ckdir: Path) -> None:
    complete = sorted(int(p.name) for p in ckdir.iterdir()
                      if p.name.isdecimal() and (p / COMPLETE).exists())
    for s in complete[:-KEEP]:
        shutil.rmtree(ckdir / str(s), ignore_errors=True)
