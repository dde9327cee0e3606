"""Progress heartbeats: each training process touches ``jobs/<id>/heartbeat/<member>`` as it
steps (at most once a second), and an executor's watchdog reads them (:func:`verdict`).

Two deadlines, both from the attempt's start:

* start-up: no member has stepped (nor ended its training loop) within ``startup_s`` -- a
  parameter server frozen before the first step blocks every worker in ps-lite's start-up,
  so the attempt never stepped and the step watchdog alone would never arm;
* freeze: a member that has stepped in this attempt has not stepped for ``watchdog_s`` --
  a SIGSTOPped or wedged worker, or a server that blocks every synchronous worker.

Either way the executor restarts the whole gang from its last complete checkpoint (or fails
the job when its attempts are spent) and says why. A member's ``<member>.done`` disarms it:
evaluation, publishing and ps-lite's shutdown are bounded by the job timeout instead.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from headrace.store.dfs import job_dir

DIR = "heartbeat"


def heartbeat_dir(root: Path, job_id: str) -> Path:
    return job_dir(root, job_id) / DIR


class Heartbeat:
    """Call it after every step; it touches its file at most every ``every_s`` seconds."""

    def __init__(self, root: Path, job_id: str, member: str, *, every_s: float = 1.0) -> None:
        self.path = heartbeat_dir(root, job_id) / member
        self.every_s = every_s
        self._last = float("-inf")

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        with contextlib.suppress(OSError):  # a heartbeat must never fail the training
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()


    def done(self) -> None:
        """The training loop ended: from here on no step is due."""
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.with_name(self.path.name + DONE).touch()


DONE = ".done"


def _members(root: Path, job_id: str) -> dict[str, tuple[float | None, float | None]]:
    """member -> (last step, end of its training loop), wall-clock seconds."""
    out: dict[str, tuple[float | None, float | None]] = {}
    try:
        paths = list(heartbeat_dir(root, job_id).iterdir())
    except OSError:
        return out
    for p in paths:
        try:
            t = p.stat().st_mtime
        except OSError:
            continue
        name, done = (p.name[:-len(DONE)], True) if p.name.endswith(DONE) else (p.name, False)
        beat, end = out.get(name, (None, None))
        out[name] = (beat, t) if done else (t, end)
    return out


def verdict(root: Path, job_id: str, *, since: float, watchdog_s: float | None,
            startup_s: float | None = None, now: float | None = None) -> str | None:
    """Why the attempt started at wall time ``since`` is stuck (one line), or None.

    Start-up: no member stepped or ended training within ``startup_s``. Freeze: a member
    that stepped in this attempt and has not ended its loop is quiet for ``watchdog_s``."""
    t = time.time() if now is None else now
    members = {m: (b if b is not None and b >= since else None,
                   e if e is not None and e >= since else None)
               for m, (b, e) in _members(root, job_id).items()}
    started = any(b is not None or e is not None for b, e in members.values())
    if not started:
        if startup_s is not None and t - since >= startup_s:
            return (f"no first training step within {startup_s:g}s of the start "
                    f"(start-up deadline): a gang member is stuck or frozen before training")
        return None
    if watchdog_s is None:
        return None
    if any(e is not None for _, e in members.values()):
        return None  # a member's training loop ended: the gang is past its steps
    quiet = {m: t - b for m, (b, _) in members.items() if b is not None}
    stuck = [m for m, q in quiet.items() if q >= watchdog_s]
    if not stuck:
        return None
    who = max(stuck, key=lambda m: quiet[m])
    return (f"hung: {who} made no training step for {quiet[who]:.0f}s (watchdog "
            f"{watchdog_s:g}s)")
