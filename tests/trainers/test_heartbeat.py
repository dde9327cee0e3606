"""The watchdog's reading of heartbeats: a start-up deadline until the attempt's first step,
then each member that stepped must keep stepping; a member's end of training disarms it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from headrace.trainers.distributed.heartbeat import Heartbeat, heartbeat_dir, verdict


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_the_watchdog_is_armed_by_a_step_fires_after_silence_and_stops_at_the_end(
        tmp_path: Path) -> None:
    since = time.time() - 100  # the attempt started 100 s ago
    assert verdict(tmp_path, "j", since=since, watchdog_s=10) is None  # no step, no deadline
    w0 = Heartbeat(tmp_path, "j", "w0")
    w0()
    assert verdict(tmp_path, "j", since=since, watchdog_s=10) is None  # just stepped
    _age(w0.path, 30)
    why = verdict(tmp_path, "j", since=since, watchdog_s=10)
    assert why is not None and why.startswith("hung: w0 made no training step for 3"), why
    # A previous attempt's heartbeats do not arm this one.
    assert verdict(tmp_path, "j", since=time.time() + 1, watchdog_s=0.001) is None
    w0.done()  # the training loop ended: evaluation and publishing are not steps
    for p in heartbeat_dir(tmp_path, "j").iterdir():
        if not p.name.endswith(".done"):
            _age(p, 60)
    assert verdict(tmp_path, "j", since=since, watchdog_s=10) is None


def test_one_frozen_member_is_named_while_another_still_steps(tmp_path: Path) -> None:
    since = time.time() - 100
    w0, w1 = Heartbeat(tmp_path, "j", "w0"), Heartbeat(tmp_path, "j", "w1")
    w0()
    w1()
    _age(w1.path, 20)  # w1 froze; w0 (an asynchronous peer) carries on
    why = verdict(tmp_path, "j", since=since, watchdog_s=10)
    assert why is not None and why.startswith("hung: w1 made no training step for 2"), why


def test_a_gang_with_no_first_step_by_the_start_up_deadline_is_stuck(tmp_path: Path) -> None:
    since = time.time() - 30
    assert verdict(tmp_path, "j", since=since, watchdog_s=600, startup_s=60) is None
    why = verdict(tmp_path, "j", since=since, watchdog_s=600, startup_s=20)
    assert why is not None and why.startswith("no first training step within 20s"), why
    # A previous attempt's steps do not count as this attempt's start.
    old = Heartbeat(tmp_path, "j", "w0")
    old()
    _age(old.path, 60)
    assert verdict(tmp_path, "j", since=since, watchdog_s=600, startup_s=20) is not None
    old.done()  # a retry with nothing to train (already published) is past start-up
    assert verdict(tmp_path, "j", since=since, watchdog_s=600, startup_s=20) is None


def test_a_heartbeat_touches_its_file_at_most_once_a_second(tmp_path: Path) -> None:
    beat = Heartbeat(tmp_path, "j", "w0", every_s=1.0)
    beat()
    _age(beat.path, 5)
    before = beat.path.stat().st_mtime
    beat()  # within the second: not touched again
    assert beat.path.stat().st_mtime == before
