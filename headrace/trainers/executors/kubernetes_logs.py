"""A training attempt's pod logs: read only when a job fails (or for ``headrace jobs logs``),
each line tagged by gang member, and sent as events once each (timestamps mark what was sent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headrace.trainers.executors.kubernetes_api import ApiCalls
from headrace.trainers.executors.kubernetes_objects import CONTAINER, TrainingJobSpec
from headrace.trainers.executors.kubernetes_status import member_tag, selector


@dataclass(frozen=True)
class PodLogs:
    """Reads through ``api``/``core`` (``CoreV1Api`` or a fake); after a pod's first read only
    the last ``window_s`` seconds are fetched."""

    api: ApiCalls
    core: Any
    timeout_s: float
    window_s: int

    def mirror(self, spec: TrainingJobSpec, last_log: dict[str, str], *,
               emit: Callable[..., None], sink: Callable[[str], None] | None = None) -> None:
        """Send each pod's new log lines as one event (the control plane appends them to the
        job's log, once each: it marks what it appended); ``last_log`` (pod -> the last timestamp
        sent) is what was sent before. With ``sink`` (``jobs logs``): every line, to the sink,
        marking nothing here."""
        pods = self.api.call(lambda: self.core.list_namespaced_pod(
            spec.namespace, label_selector=selector(spec), _request_timeout=self.timeout_s))
        for pod in sorted(pods.items or [], key=lambda p: p.metadata.name):
            name = pod.metadata.name
            if (pod.status.phase if pod.status else None) == "Pending":
                continue
            since = last_log.get(name) if sink is None else None
            text = self.api.call(self._reader(spec, name, since), missing_ok=True)
            at: dict[str, int] = {}  # lines so far at each timestamp (several can share one)
            new: list[tuple[str, int, str]] = []
            for line in (text or "").splitlines():
                ts, _, msg = line.partition(" ")
                seq = at[ts] = at.get(ts, -1) + 1
                # RFC 3339 timestamps of one pod sort as strings; skip what was already sent.
                if since is not None and ts <= since:
                    continue
                tag = member_tag(spec, name)
                line = f"[{tag}] {msg}" if tag else msg
                if sink is not None:
                    sink(line)
                else:
                    new.append((ts, seq, line))
            if new:
                emit("\n".join(line for _, _, line in new), pod=name, lines=new)
                last_log[name] = new[-1][0]

    def _reader(self, spec: TrainingJobSpec, pod: str, since: str | None) -> Callable[[], Any]:
        # After the first read only a recent window is fetched; timestamps drop the overlap.
        window = self.window_s if since else None

        def read() -> Any:
            return self.core.read_namespaced_pod_log(
                pod, spec.namespace, container=CONTAINER, timestamps=True, since_seconds=window,
                _request_timeout=self.timeout_s)

        return read
