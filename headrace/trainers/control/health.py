"""The control plane's probes: ``/livez`` and ``/readyz`` on a small HTTP server thread.

Liveness fails (503) when, for longer than ``liveness_s``:

* the control loop has not ticked (the event loop is blocked), or
* an agent has been busy with one train request (a stuck agent), or
* the Kafka consumer has had no group session (no coordinator or no member id: the session
  was lost and has not come back).

Both fail at once, for good, when the process cannot go on (``fail``): a faust agent crashed
(its topic is no longer read, yet the process looked healthy) or a producer failed fatally; the
app then stops and exits non-zero so it is restarted.

Readiness: the tables are recovered and the consumer has a group session. The app updates the
state from its event loop; the server thread only reads floats and booleans.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from headrace.core.probe_server import ProbeHTTPServer


@dataclass
class ControlHealth:
    liveness_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    started_at: float = field(default=0.0)
    last_tick: float | None = None
    last_session: float | None = None
    busy_since: float | None = None
    recovered: bool = False
    session: bool = False
    fatal: str | None = None  # why the process cannot go on (an agent crashed...)

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    def tick(self, *, session: bool) -> None:
        now = self.clock()
        self.last_tick = now
        self.session = session
        if session:
            self.last_session = now

    def fail(self, reason: str) -> bool:
        """The process cannot go on: both probes fail from now on. True the first time."""
        first, self.fatal = self.fatal is None, self.fatal or reason
        return first

    def live(self) -> tuple[bool, dict[str, object]]:
        now = self.clock()
        problems: list[str] = [self.fatal] if self.fatal else []
        # Before the first tick or session, the start time stands in: a slow start is not dead.
        since_tick = now - (self.last_tick or self.started_at)
        since_session = now - (self.last_session or self.started_at)
        if since_tick > self.liveness_s:
            problems.append(f"control loop has not ticked for {since_tick:.0f}s")
        if since_session > self.liveness_s:
            problems.append(f"no Kafka group session for {since_session:.0f}s")
        if self.busy_since is not None and now - self.busy_since > self.liveness_s:
            problems.append(f"an agent is stuck on one request for {now - self.busy_since:.0f}s")
        return not problems, {"problems": problems, "since_tick_s": round(since_tick, 3),
                              "since_session_s": round(since_session, 3)}

    def ready(self) -> tuple[bool, dict[str, object]]:
        ok = self.recovered and self.session and self.fatal is None
        info: dict[str, object] = {"tables_recovered": self.recovered,
                                   "kafka_session": self.session}
        if not ok:  # the first problem, in words
            info["reason"] = self.fatal or ("no Kafka group session" if not self.session
                                            else "tables not recovered yet")
        return ok, info


class HealthServer(ProbeHTTPServer):
    def __init__(self, *, host: str, port: int, health: ControlHealth) -> None:
        super().__init__(host=host, port=port, state=health, name="control-probes")
