"""A control plane whose Kubernetes executor talks to a recording fake API (no API server can
run on these machines): ``python -m tests.trainers.kube_control_proc CONFIG_JSON``.

The fake writes every object the control plane creates, as the API server would receive it
(camelCase JSON), to ``<out>/<n>-<kind>.json``; a created Job reports one active pod on the
first watch and ``Failed`` (backoff limit reached) on the next: a success would be published
by the trainer pod itself, a pod that never ran is reported by the control plane.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.topology.validation import to_manifest
from headrace.trainers.control.service import ExecutorChoice, run_control
from headrace.trainers.control.settings import ControlSettings
from headrace.trainers.executors.kubernetes import KubeApis
from tests.kube_fake import FakeKube, pod


class RecordingCluster(FakeKube):
    """The fake API (tests/kube_fake.py), writing each created object to a file; a created
    Job shows one active pod on the first watch after its creation and ``Failed`` on the
    next. ``stall_s`` > 0: once the first Job exists, every API call hangs until that many
    seconds have passed (an API server that stalls)."""

    def __init__(self, out: Path, *, stall_s: float = 0.0) -> None:
        super().__init__()
        self.out = out
        self.n = 0
        self.watched: dict[str, int] = {}
        self.stall_s = stall_s
        self.stall_until = 0.0

    def _create(self, body: Any) -> Any:
        got = super()._create(body)
        manifest = to_manifest(body)
        self.n += 1
        path = self.out / f"{self.n:03d}-{manifest['kind']}.json"
        path.write_text(json.dumps(manifest, indent=1, default=str))
        if self.stall_s and not self.stall_until:
            self.stall_until = time.monotonic() + self.stall_s
            (self.out.parent / "stall-started").write_text(str(time.time()))
        return got

    def _request(self, verb: str, kind: str, name: str) -> None:
        left = self.stall_until - time.monotonic()
        if left > 0:
            time.sleep(left)
        super()._request(verb, kind, name)

    def _changes(self) -> list[dict[str, Any]]:
        for name in self.names("Job"):
            seen = self.watched.get(name, 0)
            self.watched[name] = seen + 1
            failed = [NS(type="Failed", status="True", reason="BackoffLimitExceeded",
                         message="Job has reached the specified backoff limit")]
            self.statuses[name] = (NS(active=1, failed=0, succeeded=0, conditions=[])
                                   if seen == 0 else
                                   NS(active=0, failed=1, succeeded=0, conditions=failed))
            if seen == 1:  # the failed pod, and what it printed
                self.pods.append(pod(f"{name}-x1", phase="Failed", exit_code=1))
                self.logs[f"{name}-x1"] = "2024-01-01T00:00:01Z MemoryError: out of memory\n"
        return super()._changes()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    fake = RecordingCluster(Path(cfg["out"]), stall_s=float(cfg.get("stall_s", 0)))
    control = ControlSettings(executor="kubernetes", k8s_image="registry.example/headrace:1",
                              k8s_namespace="ml", control_http_port=0,
                              control_liveness_s=float(cfg.get("liveness_s", 60)),
                              k8s_trainer_env={"HEADRACE_MAX_EPOCHS": "50"})
    run_control(root=Path(cfg["root"]), conn=KafkaConnection(cfg["bootstrap"], timeout_s=15.0),
                topics=ControlTopics.with_prefix(cfg["prefix"]), tick_s=0.2,
                choice=ExecutorChoice(control, KubeApis(batch=fake, core=fake, custom=fake,
                                                          networking=fake)),
                kafka_password_file=Path("/etc/headrace/kafka-sasl/password"))


if __name__ == "__main__":
    main()
