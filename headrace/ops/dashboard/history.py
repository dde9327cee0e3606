"""Training curves: a job's ``history.json`` (or a manifest's ``training``) as plot series.

The agreed format (written by the trainer)::

    {"epochs": [{"epoch": 1, "loss": 0.9, "val_loss": 1.0, "accuracy": 0.6,
                 "val_accuracy": 0.55, "learning_rate": 0.001}, ...],
     "epochs_run": 12, "best_epoch": 9, "stopped_because": "early_stopping"}

Regressors carry ``rmse``/``val_rmse`` (or others) instead of accuracy: every numeric key
becomes a series. The file is read defensively (size-capped; a malformed entry is dropped, a
non-finite value becomes a gap) so a half-written or foreign file never breaks the page.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

HISTORY = "history.json"
MAX_BYTES = 4 * 1024 * 1024
MAX_EPOCHS = 10_000
MAX_SERIES = 24


def read_history(job_dir: Path) -> dict[str, Any] | None:
    """The job's curves, or None when it wrote none (an old job, or one still starting)."""
    path = job_dir / HISTORY
    try:
        if path.stat().st_size > MAX_BYTES:
            return {"error": f"{HISTORY} is larger than {MAX_BYTES // (1024 * 1024)} MiB"}
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": f"{HISTORY} unreadable: {type(exc).__name__}"}
    return curves(raw)


def curves(raw: Any) -> dict[str, Any] | None:
    """``{"epochs": [...], "series": {name: [value|None]}, "epochs_run", "best_epoch",
    "stopped_because"}`` from the agreed object; None if it holds no epoch."""
    if not isinstance(raw, dict) or not isinstance(raw.get("epochs"), list):
        return None
    rows = [e for e in raw["epochs"][:MAX_EPOCHS] if isinstance(e, dict)]
    epochs: list[int] = []
    series: dict[str, list[float | None]] = {}
    for i, row in enumerate(rows):
        ep = _int(row.get("epoch"))
        epochs.append(i + 1 if ep is None else ep)
        for key, value in row.items():
            if key == "epoch" or not isinstance(key, str) or not _number(value):
                continue
            if key not in series:
                if len(series) >= MAX_SERIES:
                    continue
                series[key] = [None] * i
            series[key].append(float(value) if math.isfinite(value) else None)
        for values in series.values():
            if len(values) < len(epochs):
                values.append(None)
    if not epochs:
        return None
    out: dict[str, Any] = {"epochs": epochs, "series": series}
    for key in ("epochs_run", "best_epoch"):
        out[key] = _int(raw.get(key))
    stopped = raw.get("stopped_because")
    out["stopped_because"] = stopped[:200] if isinstance(stopped, str) else None
    return out


def _int(value: Any) -> int | None:
    return int(value) if _number(value) and math.isfinite(value) else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
