"""Progress heartbeats: each training process touches ``jobs/<id>/heartbeat/<member>`` as it
steps (at most once a second), and an executor's watchdog reads the newest of them.

A gang that stops stepping -- a SIGSTOPped or wedged parameter server or worker blocks every
synchronous worker -- is noticed when no member has stepped for ``watchdog_s``: the executor
then restarts the whole gang from its last complete checkpoint and logs why. The watchdog is
armed by the attempt's first heartbeat and disarmed when a member's training loop ends
(``<member>.done``): start-up, evaluation, publishing and ps-lite's shutdown are bounded by the
job timeout instead.
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


def _times(root: Path, job_id: str, *, done: bool) -> list[float]:
    try:
        return [p.stat().st_mtime for p in heartbeat_dir(root, job_id).iterdir()
                if p.name.endswith(DONE) == done]
    except OSError:
        return []


def last_beat(root: Path, job_id: str) -> float | None:
    """The newest heartbeat of any member (wall-clock seconds), or None before the first."""
    return max(_times(root, job_id, done=False), default=None)


def stalled(root: Path, job_id: str, *, since: float, watchdog_s: float,
            now: float | None = None) -> float | None:
    """Seconds without a heartbeat when this attempt (started at wall time ``since``) has
    stepped and then stopped for ``watchdog_s`` or more; else None."""
    beat = last_beat(root, job_id)
    if beat is None or beat < since:
        return None  # not armed: this attempt has not stepped yet
    if max(_times(root, job_id, done=True), default=0.0) >= since:
        return None  # disarmed: this attempt's training loop has ended
    quiet = (time.time() if now is None else now) - beat
    return quiet if quiet >= watchdog_s else None
