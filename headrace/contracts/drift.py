"""Drift seen live by a scorer, on ``events.drift`` (compacted per stream, model and feature:
``key()``), read by the drift trigger rule, ``headrace drift`` and the dashboard."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import Field

from headrace.contracts.base import Contract, utcnow
from headrace.core.types import SafeName


class WindowRange(Contract):
    """The records of one window in one partition of the data topic: offsets first..last."""

    partition: int = Field(ge=0)
    first: int = Field(ge=0)
    last: int = Field(ge=0)


class DriftDetected(Contract):
    """One feature's state after a closed window. ``drifting`` is True when a statistic went
    over its calibrated threshold in this window, False when the feature is back within its
    thresholds (the latest record per key is the feature's current state)."""

    SCHEMA: ClassVar[str] = "headrace.DriftDetected"

    stream: SafeName
    model_name: SafeName
    model_version: int = Field(ge=1)
    feature: str = Field(min_length=1, max_length=256)  # an input, a summary ("image:brightness")
    statistic: str = Field(min_length=1, max_length=32)  # psi, ks, chi2, js
    value: float
    threshold: float
    drifting: bool
    statistics: dict[str, float] = Field(default_factory=dict)  # every statistic of the window
    window: int = Field(ge=0)  # the scorer's window sequence number for this model version
    consecutive: int = Field(default=0, ge=0)  # windows in a row that drifted, this one included
    rows: int = Field(ge=0)
    ranges: list[WindowRange] = Field(default_factory=list)
    scorer: str = Field(default="", max_length=256)  # the instance that saw it
    ts: datetime = Field(default_factory=utcnow)
    # The window's counts in the reference profile's bins (``headrace drift --png`` draws them).
    live: list[int] = Field(default_factory=list, max_length=4096)

    def key(self) -> bytes:
        return f"{self.stream}|{self.model_name}|{self.model_version}|{self.feature}".encode()


class DriftWindowState(Contract):
    """A scorer's open drift window for one model version, on ``control.drift.state``
    (compacted, ``key()``): produced with every batch, before its offsets are committed, so a
    restarted scorer resumes the window and each feature's run of drifting windows."""

    SCHEMA: ClassVar[str] = "headrace.DriftWindowState"

    stream: SafeName
    model_name: SafeName
    model_version: int = Field(ge=1)
    scope: str = Field(min_length=1, max_length=256)  # whose window: its partitions or host
    window: int = Field(ge=0)  # sequence number of the open window
    rows: int = Field(ge=0)
    counts: dict[str, str] = Field(default_factory=dict)  # feature -> windows.snapshot blob
    consecutive: dict[str, int] = Field(default_factory=dict)  # feature -> windows drifting
    drifting: dict[str, bool] = Field(default_factory=dict)  # feature -> last published state
    ranges: list[WindowRange] = Field(default_factory=list)  # the open window's offsets
    last: dict[str, str] = Field(default_factory=dict)  # the last closed window's counts
    last_rows: int = Field(default=0, ge=0)
    opened_at: datetime = Field(default_factory=utcnow)
    ts: datetime = Field(default_factory=utcnow)

    def key(self) -> bytes:
        return f"{self.stream}|{self.model_name}|{self.model_version}|{self.scope}".encode()
