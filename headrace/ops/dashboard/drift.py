"""The dashboard's drift panel: per stream, the current per-feature table from the compacted
``events.drift`` (the latest ``DriftDetected`` per stream, model, version and feature), with
how long each feature has been in its state."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from headrace.contracts import DriftDetected, parse
from headrace.core.errors import ValidationFailed
from headrace.streams.reading import Record


@dataclass(frozen=True)
class FeatureState:
    latest: DriftDetected
    since: str  # the first record of the current run of this state (as far as the topic keeps)


class DriftBoard:
    """Folds ``events.drift`` records (in topic order) into the latest state per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.states: dict[bytes, FeatureState] = {}
        self.records = 0
        self.bad_records = 0

    def apply(self, rec: Record) -> None:
        if rec.value is None:  # a tombstone: the feature's state was removed
            if rec.key is not None:
                with self.lock:
                    self.states.pop(rec.key, None)
            return
        try:
            ev = parse(DriftDetected, rec.value)
        except ValidationFailed:
            with self.lock:
                self.bad_records += 1
            return
        key = ev.key()
        with self.lock:
            self.records += 1
            prev = self.states.get(key)
            same_run = prev is not None and prev.latest.drifting == ev.drifting
            since = prev.since if same_run and prev is not None else ev.ts.isoformat()
            self.states[key] = FeatureState(ev, since)

    def view(self, stream: str | None = None) -> dict[str, Any]:
        """{"streams": [{stream, drifting, features: [...]}]}, drifting features first."""
        with self.lock:
            states = [s for s in self.states.values()
                      if stream is None or s.latest.stream == stream]
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
