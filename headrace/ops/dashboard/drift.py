"""The dashboard's drift panel: per stream, the current per-feature table from the compacted
``events.drift`` (the latest ``DriftDetected`` per stream, model, version and feature), with
how long each feature has been in its state."""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

from headrace.contracts import DriftDetected
from headrace.core.bad_records import BadRecords
from headrace.streams.compacted import Latest
from headrace.streams.reading import Record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeatureState:
    latest: DriftDetected
    since: str  # the first record of the current run of this state (as far as the topic keeps)


class DriftBoard:
    """Folds ``events.drift`` records (in topic order) into the latest event per key (the
    compacted-topic table: a tombstone removes the key), with since when each is in its
    state."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latest = Latest(DriftDetected, BadRecords(log, "drift event"))
        self.since: dict[bytes, str] = {}

    @property
    def records(self) -> int:
        return self.latest.read

    @property
    def bad_records(self) -> int:
        return self.latest.bad.count

    def apply(self, rec: Record) -> None:
        with self.lock:
            prev = self.latest.get(rec.key)
            self.latest.take(rec)
            ev = self.latest.get(rec.key)
            if rec.key is None or ev is None:  # no key, or a tombstone removed it
                if rec.key is not None:
                    self.since.pop(rec.key, None)
                return
            same_run = prev is not None and prev.drifting == ev.drifting
            self.since[rec.key] = (self.since.get(rec.key, ev.ts.isoformat()) if same_run
                                   else ev.ts.isoformat())

    def view(self, stream: str | None = None) -> dict[str, Any]:
        """{"streams": [{stream, drifting, features: [...]}]}, drifting features first."""
        with self.lock:
            states = [FeatureState(ev, self.since.get(k, ev.ts.isoformat()))
                      for k, ev in self.latest.table().items()
                      if stream is None or ev.stream == stream]
            counts = (self.records, self.bad_records)
        by_stream: dict[str, list[FeatureState]] = {}
        for s in states:
            by_stream.setdefault(s.latest.stream, []).append(s)
        out = []
        for name in sorted(by_stream):
            rows = sorted(by_stream[name], key=lambda s: (
                not s.latest.drifting, s.latest.model_name, -s.latest.model_version,
                s.latest.feature))
            out.append({"stream": name, "drifting": sum(s.latest.drifting for s in rows),
                        "features": [_row(s) for s in rows]})
        return {"streams": out, "records": counts[0], "bad_records": counts[1]}


def _row(s: FeatureState) -> dict[str, Any]:
    ev = s.latest
    return {"model": ev.model_name, "version": ev.model_version, "feature": ev.feature,
            "statistic": ev.statistic, "value": _finite(ev.value),
            "threshold": _finite(ev.threshold),
            "drifting": ev.drifting, "since": s.since, "updated": ev.ts.isoformat(),
            "consecutive": ev.consecutive, "window": ev.window, "rows": ev.rows,
            "scorer": ev.scorer}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no NaN or infinity
