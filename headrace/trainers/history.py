"""The training curve of a job and the weights of its best epoch.

``jobs/<id>/history.json`` (seams format, also the manifest's ``training``)::

    {"epochs": [{"epoch": 1, "loss": .., "val_loss": .., "val_accuracy": .., "learning_rate": ..}],
     "epochs_run": 7, "best_epoch": 5, "stopped_because": "early_stopping"}

``jobs/<id>/best/`` holds the best epoch's weights (a backend checkpoint plus ``epoch``), written
to a temporary directory and renamed, so it is complete or absent; ``jobs/<id>/start/`` the
weights before the first epoch, alike, when they are a model worth keeping (a regressor's ridge
start: ``start_check``), with ``start_check`` in history.json saying which was published.
A resumed job keeps the rows up to its checkpoint's epoch and replays them into its stop rules
and schedule.
"""

from __future__ import annotations

import json
import math
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.store.dfs import fsync_dir, job_dir, write_atomic

HISTORY = "history.json"
BEST = "best"
START = "start"  # the weights before the first epoch (epoch 0)
_EPOCH = "epoch.json"


@dataclass
class History:
    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    stopped_because: str | None = None
    best_loss: float = math.inf
    batch_size: int | None = None  # what the job trained with (chosen from the rows if not given)
    start_check: dict[str, Any] | None = None  # the trained model against its start

    def add(self, row: dict[str, float]) -> bool:
        """Append an epoch; True when it is the best so far (lowest validation loss)."""
        self.epochs.append(row)
        loss = row.get("val_loss", math.nan)
        if math.isfinite(loss) and loss < self.best_loss:
            self.best_loss, self.best_epoch = loss, int(row["epoch"])
            return True
        return False

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"epochs": self.epochs, "epochs_run": len(self.epochs),
                               "best_epoch": self.best_epoch,
                               "stopped_because": self.stopped_because}
        if self.batch_size is not None:
            out["batch_size"] = self.batch_size
        if self.start_check is not None:
            out["start_check"] = self.start_check
        return out

    def curve(self, max_lines: int = 20) -> str:
        """One compact line an epoch (``jobs show``); a long run shows evenly spaced epochs
        plus the best and the last, at most about ``max_lines``."""
        n = len(self.epochs)
        keep = set(range(n)) if n <= max_lines else {
            round(i * (n - 1) / (max_lines - 3)) for i in range(max_lines - 2)}
        keep |= {n - 1, self.best_epoch - 1} & set(range(n))
        return "\n".join(format_row(self.epochs[i], best=i + 1 == self.best_epoch)
                         for i in sorted(keep))


def format_row(row: dict[str, float], *, best: bool = False) -> str:
    keys = [k for k in ("loss", "val_loss", "accuracy", "val_accuracy", "rmse", "val_rmse")
            if k in row]
    text = " ".join(f"{k}={row[k]:.4f}" for k in keys)
    lr = f" lr={row['learning_rate']:.2g}" if "learning_rate" in row else ""
    return f"{int(row['epoch']):>3} {text}{lr}{' *best' if best else ''}"


def read(root: Path, job_id: str, *, upto: int | None = None) -> History:
    """The job's history (the epochs ``<= upto`` when given: a resumed job's checkpoint)."""
    path = job_dir(root, job_id) / HISTORY
    h = History()
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return h
    for row in data.get("epochs", []):
        if upto is None or int(row["epoch"]) <= upto:
            h.add({k: float(v) for k, v in row.items()})
    if upto is None:
        h.stopped_because = data.get("stopped_because")
        h.start_check = data.get("start_check")
    h.batch_size = data.get("batch_size")
    return h


def write(root: Path, job_id: str, history: History) -> None:
    write_atomic(job_dir(root, job_id) / HISTORY,
                 json.dumps(history.record(), indent=1).encode())


def save_best(root: Path, job_id: str, epoch: int, save: Callable[[Path], None], *,
              which: str = BEST) -> None:
    """The weights of ``epoch`` into ``which`` (``best/``, or ``start/`` for epoch 0)."""
    d = job_dir(root, job_id)
    tmp = d / f".tmp-best-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save(tmp)
        write_atomic(tmp / _EPOCH, json.dumps({"epoch": epoch}).encode())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = d / f".old-best-{uuid.uuid4().hex[:8]}"
    if (d / which).exists():
        (d / which).rename(old)
    tmp.rename(d / which)
    fsync_dir(d)
    shutil.rmtree(old, ignore_errors=True)


def best_path(root: Path, job_id: str, epoch: int, *, which: str = BEST) -> Path | None:
    """The saved weights of ``epoch``, or None when ``which`` holds another epoch (or none)."""
    d = job_dir(root, job_id) / which
    try:
        saved = json.loads((d / _EPOCH).read_bytes())["epoch"]
    except (OSError, ValueError, KeyError):
        return None
    return d if saved == epoch else None
