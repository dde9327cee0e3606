"""The CPUs a pod may use: its affinity capped by the cgroup quota (v2 and v1), rounded up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headrace.core.cpus import cgroup_quota, cpu_limit


def _v2(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(text + "\n")
    return root


def test_the_cgroup_v2_quota_caps_the_affinity_rounded_up(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert cpu_limit(_v2(tmp_path / "a", "250000 100000")) == 3
    assert cgroup_quota(tmp_path / "a") == 2.5
    assert cpu_limit(_v2(tmp_path / "b", "max 100000")) == 16  # no quota
    assert cpu_limit(_v2(tmp_path / "c", "5000 100000")) == 1  # a twentieth: still one
    assert cpu_limit(_v2(tmp_path / "d", "6400000 100000")) == 16  # quota over the affinity
    assert cpu_limit(_v2(tmp_path / "e", "garbage")) == 16


def test_the_cgroup_v1_quota_and_no_cgroup_at_all(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    (tmp_path / "v1" / "cpu").mkdir(parents=True)
    (tmp_path / "v1" / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (tmp_path / "v1" / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_limit(tmp_path / "v1") == 2
    (tmp_path / "v1" / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # unlimited
    assert cpu_limit(tmp_path / "v1") == 4
    assert cpu_limit(tmp_path / "none") == 4
