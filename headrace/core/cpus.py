"""How many CPUs this process may use: its affinity, capped by its cgroup's CPU quota.

``os.cpu_count()`` is the machine's: a pod limited to 4 CPUs on a 64-core node would start 64
decode threads and be throttled. The quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` /
``cpu.cfs_period_us``) is rounded up: a limit of 2.5 CPUs gets 3 threads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_quota(root: Path = CGROUP) -> float | None:
    """CPUs the cgroup's quota allows (None: unlimited or unknown)."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota == "max" or not period:
            return None
        return int(quota) / int(period) if int(period) > 0 else None
    quota_us, period_us = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(
        root / "cpu" / "cpu.cfs_period_us")
    if quota_us is None or period_us is None or int(quota_us) <= 0 or int(period_us) <= 0:
        return None
    return int(quota_us) / int(period_us)


def cpu_limit(root: Path = CGROUP) -> int:
    """CPUs available to this process (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota = cgroup_quota(root)
    except ValueError:  # a malformed file: trust the affinity
        quota = None
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)
