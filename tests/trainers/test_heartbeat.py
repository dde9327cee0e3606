"""The progress watchdog's reading of heartbeats: armed by the attempt's first step, fired
after ``watchdog_s`` without one, disarmed once a member's training loop has ended."""

from __future__ import annotations

import os
import time
from pathlib import Path

from headrace.trainers.distributed.heartbeat import Heartbeat, heartbeat_dir, stalled


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_the_watchdog_is_armed_by_a_step_fires_after_silence_and_stops_at_the_end(
        tmp_path: Path) -> None:
    since = time.time() - 100  # the attempt started 100 s ago
    assert stalled(tmp_path, "j", since=since, watchdog_s=10) is None  # no step yet: not armed
    w0 = Heartbeat(tmp_path, "j", "w0")
    w0()
    assert stalled(tmp_path, "j", since=since, watchdog_s=10) is None  # just stepped
    _age(w0.path, 30)
    quiet = stalled(tmp_path, "j", since=since, watchdog_s=10)
    assert quiet is not None and 29 <= quiet <= 31
    Heartbeat(tmp_path, "j", "w1")()  # any member stepping is progress (synchronous gang)
    assert stalled(tmp_path, "j", since=since, watchdog_s=10) is None
    # A previous attempt's heartbeats do not arm this one.
    assert stalled(tmp_path, "j", since=time.time() + 1, watchdog_s=0.001) is None
    w0.done()  # the training loop ended: evaluation and publishing are not steps
    for p in heartbeat_dir(tmp_path, "j").iterdir():
        if not p.name.endswith(".done"):
            _age(p, 60)
    assert stalled(tmp_path, "j", since=since, watchdog_s=10) is None


def test_a_heartbeat_touches_its_file_at_most_once_a_second(tmp_path: Path) -> None:
    beat = Heartbeat(tmp_path, "j", "w0", every_s=1.0)
    beat()
    _age(beat.path, 5)
    before = beat.path.stat().st_mtime
    beat()  # within the second: not touched again
    assert beat.path.stat().st_mtime == before
