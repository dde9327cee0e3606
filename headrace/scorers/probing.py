"""HTTP probes and metrics: ``/livez``, ``/readyz``, ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from headrace.core.probe_server import ProbeHTTPServer
from headrace.scorers.metrics import ScorerMetrics


class ProbeState:
    """What the probes report. Liveness: the poll loop made progress within ``liveness_s``
    (always true while starting: a startup probe covers model loading). Readiness: a model is
    loaded and warmed, partitions are assigned, and the scorer is not stopping."""

    def __init__(self, *, liveness_s: float) -> None:
        self.liveness_s = liveness_s
        self.started = False
        self.stopping = False
        self.last_progress: Callable[[], float] = time.monotonic
        self.model_ready: Callable[[], bool] = lambda: False
        self.assigned: Callable[[], int] = lambda: 0
        self.model_ref: Callable[[], str | None] = lambda: None

    def live(self) -> tuple[bool, dict[str, object]]:
        if not self.started:
            return True, {"phase": "starting"}
        idle = time.monotonic() - self.last_progress()
        return idle <= self.liveness_s, {"phase": "running", "since_progress_s": round(idle, 3)}

    def ready(self) -> tuple[bool, dict[str, object]]:
        model = self.model_ready()
        parts = self.assigned()
        ok = model and parts > 0 and self.started and not self.stopping
        return ok, {"model": self.model_ref(), "model_ready": model, "partitions": parts,
                    "stopping": self.stopping}


class ProbeServer(ProbeHTTPServer):
    """The scorer's probes, and ``/metrics`` (Prometheus text)."""

    def __init__(self, *, host: str, port: int, state: ProbeState, metrics: ScorerMetrics) -> None:
        def metrics_page() -> tuple[bytes, str]:
            metrics.ready.set(1 if state.ready()[0] else 0)
            return generate_latest(metrics.registry), CONTENT_TYPE_LATEST

        super().__init__(host=host, port=port, state=state, name="probes",
                         pages={"/metrics": metrics_page},
                         setting="--http-port or HEADRACE_SCORER_HTTP_PORT")
