"""HTTP probes and metrics: ``/livez``, ``/readyz``, ``/metrics`` (Prometheus text).

Liveness fails when the scoring loop has not turned for ``liveness_s`` (a hung thread), or
when the scorer is **stalled**: it holds partitions whose records it is not reading (the
broker's high watermark above its position, ``stall.LagWatch``) and has consumed nothing for
``stall_s``, or when it holds no partition while the group's committed offsets stand still for
``stall_s`` with records waiting (``stall.GroupStandstill``: nobody is reading them). An empty
poll is not progress: a scorer whose coordinator hung polls nothing forever. Before the loop
starts, liveness holds (the startup probe covers model loading).

Both say which brokers refuse connections now, if any (``kafka``; readiness's reason too when
it holds no partition). Readiness fails while there is no model (``phase`` says what is
happening: waiting for a model, ``loading model NAME:VERSION``, ``warming NAME:VERSION``),
without partitions, while stalled, and while stopping. Each failing probe gives its reason in
the JSON body, sets ``headrace_scorer_probe_failing{probe,reason}`` (and
``headrace_scorer_stalled``), and logs one line when its state changes, not one per probe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from headrace.core.probe_server import ProbeHTTPServer
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.stall import Lag

log = logging.getLogger(__name__)

REASONS = ("starting", "loading", "no_model", "no_partitions", "stalled", "stopping",
           "loop_stuck")


class ProbeState:
    """What the probes report (see the module doc). The scorer sets the callables once its
    parts exist; ``clock`` is injectable for tests."""

    def __init__(self, *, liveness_s: float, stall_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic,
                 metrics: ScorerMetrics | None = None) -> None:
        self.liveness_s = liveness_s
        self.stall_s = stall_s
        self.clock = clock
        self.metrics = metrics
        self.started = False
        self.stopping = False
        self.phase = "starting"  # what the scorer is doing before it runs (readiness says it)
        self.last_progress: Callable[[], float] = clock  # the loop's last turn
        self.last_consumed: Callable[[], float | None] = lambda: None  # last non-empty batch
        self.lag: Callable[[], Lag | None] = lambda: None  # the broker's view, recent or None
        # While it holds no partition: (s the group's commits stood still, records waiting).
        self.group_standstill: Callable[[], tuple[float, int] | None] = lambda: None
        self.last_retry: Callable[[], tuple[float, str] | None] = lambda: None  # (when, what)
        self.model_ready: Callable[[], bool] = lambda: False
        self.assigned: Callable[[], int] = lambda: 0
        self.model_ref: Callable[[], str | None] = lambda: None
        # Which brokers refuse the process's clients now (``streams.client_log``), or None.
        self.kafka_unreachable: Callable[[], str | None] = lambda: None
        self._started_at: float | None = None
        self._said: dict[str, str | None] = {"live": None, "ready": None}
        self._lock = threading.Lock()

    def start(self) -> None:
        """The scoring loop starts now."""
        self._started_at = self.clock()
        self.phase = "running"
        self.started = True

    # -- the checks ------------------------------------------------------------------------
    def stalled(self) -> str | None:
        """Why the scorer is stalled, or None."""
        if not self.started or self.stopping:
            return None
        standstill = self._standstill()
        if standstill is not None:
            return standstill
        lag = self.lag()
        behind = {tp: n for tp, n in (lag or {}).items() if n > 0}
        if not behind:
            return None
        now = self.clock()
        last = self.last_consumed()
        since = now - (last if last is not None else (self._started_at or now))
        if since <= self.stall_s:
            return None
        retry = self.last_retry()
        # The loop retrying something since it last consumed is why it stalled: say so.
        cause = (f"; the loop is retrying: {retry[1][:300]}" if retry is not None
                 and (last is None or retry[0] >= last) and now - retry[0] <= self.stall_s
                 else "")
        return (f"stalled: consumed nothing for {since:.0f}s (HEADRACE_SCORER_STALL_S="
                f"{self.stall_s:g}) while {len(behind)} assigned partition(s) hold "
                f"{sum(behind.values())} unconsumed records{cause}")

    def _standstill(self) -> str | None:
        """Holding no partition while the group commits nothing and records wait."""
        idle = self.group_standstill()
        if idle is None or idle[0] <= self.stall_s:
            return None
        return (f"stalled: holding no partition while the group has committed nothing for "
                f"{idle[0]:.0f}s (HEADRACE_SCORER_STALL_S={self.stall_s:g}) and "
                f"{idle[1]} records wait: no member is consuming them")

    def live(self) -> tuple[bool, dict[str, object]]:
        if not self.started:
            return self._verdict("live", None, None, {"phase": self.phase})
        now = self.clock()
        idle = now - self.last_progress()
        last = self.last_consumed()
        info: dict[str, object] = {
            "phase": self.phase, "since_loop_s": round(idle, 3),
            "since_consumed_s": None if last is None else round(now - last, 3)}
        kafka = self.kafka_unreachable()
        if kafka is not None:
            info["kafka"] = kafka
        stalled = self.stalled()
        if stalled is not None:
            return self._verdict("live", "stalled", stalled, info)
        if idle > self.liveness_s:
            return self._verdict("live", "loop_stuck",
                                 f"the scoring loop has not turned for {idle:.0f}s", info)
        return self._verdict("live", None, None, info)

    def ready(self) -> tuple[bool, dict[str, object]]:
        model = self.model_ready()
        parts = self.assigned()
        info: dict[str, object] = {"phase": self.phase, "model": self.model_ref(),
                                   "model_ready": model, "partitions": parts,
                                   "stopping": self.stopping}
        kafka = self.kafka_unreachable()
        if kafka is not None:
            info["kafka"] = kafka
        if self.stopping:
            return self._verdict("ready", "stopping", "stopping", info)
        if not model:
            code = "loading" if self.phase.startswith(("loading", "warming")) else "no_model"
            return self._verdict("ready", code, f"no model yet: {self.phase}", info)
        if not self.started:
            return self._verdict("ready", "starting", f"not scoring yet: {self.phase}", info)
        if parts <= 0:
            stalled = self._standstill()  # said rather than "none held"
            if stalled is not None:
                return self._verdict("ready", "stalled", stalled, info)
            return self._verdict("ready", "no_partitions", "no partitions assigned" + (
                f": {kafka}" if kafka is not None else ""), info)
        stalled = self.stalled()
        if stalled is not None:
            return self._verdict("ready", "stalled", stalled, info)
        return self._verdict("ready", None, None, info)

    # -- reporting -------------------------------------------------------------------------
    def _verdict(self, probe: str, code: str | None, why: str | None,
                 info: dict[str, object]) -> tuple[bool, dict[str, object]]:
        ok = code is None
        if not ok:
            info = {**info, "reason": why, "reason_code": code}
        with self._lock:
            before, self._said[probe] = self._said[probe], code
        if code != before:
            self._changed(probe, before, code, why)
        return ok, info

    def _changed(self, probe: str, before: str | None, code: str | None,
                 why: str | None) -> None:
        if code is None:
            log.info("/%s ok again (was failing: %s)", "livez" if probe == "live" else "readyz",
                     before)
        elif code in ("starting", "loading", "no_model") and probe == "ready":
            log.info("/readyz not ready: %s", why)  # expected while starting
        else:
            log.warning("/%s failing: %s", "livez" if probe == "live" else "readyz", why)
        m = self.metrics
        if m is None:
            return
        for reason in REASONS:
            m.probe_failing.labels(stream=m.stream, probe=probe,
                                   reason=reason).set(1 if reason == code else 0)
        (m.live if probe == "live" else m.ready).set(0 if code else 1)
        if probe == "live":
            m.stalled.set(1 if code == "stalled" else 0)


class ProbeServer(ProbeHTTPServer):
    """The scorer's probes, and ``/metrics`` (Prometheus text)."""

    def __init__(self, *, host: str, port: int, state: ProbeState, metrics: ScorerMetrics) -> None:
        def metrics_page() -> tuple[bytes, str]:
            metrics.ready.set(1 if state.ready()[0] else 0)
            metrics.live.set(1 if state.live()[0] else 0)
            metrics.stalled.set(1 if state.stalled() is not None else 0)
            return generate_latest(metrics.registry), CONTENT_TYPE_LATEST

        super().__init__(host=host, port=port, state=state, name="probes",
                         pages={"/metrics": metrics_page},
                         setting="--http-port or HEADRACE_SCORER_HTTP_PORT")
