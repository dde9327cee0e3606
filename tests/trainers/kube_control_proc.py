"""A control plane whose Kubernetes executor talks to a recording fake API (no API server can
run on these machines): ``python -m tests.trainers.kube_control_proc CONFIG_JSON``.

The fake writes every object the control plane creates, as the API server would receive it
(camelCase JSON), to ``<out>/<n>-<kind>.json``; a created Job reports one active pod on the
first status read and ``Failed`` (backoff limit reached) on the next: a success would be
published by the trainer pod itself, a pod that never ran is reported by the control plane.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.topology.validation import to_manifest
from headrace.trainers.control.service import ExecutorChoice, run_control
from headrace.trainers.control.settings import ControlSettings
from headrace.trainers.executors.kubernetes import KubeApis


class NotFound(Exception):
    status = 404


class Conflict(Exception):
    status = 409


class RecordingCluster:
    """BatchV1Api + CoreV1Api + CustomObjectsApi, recording each call."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.n = 0
        self.reads: dict[str, int] = {}

    def _record(self, body: Any) -> Any:
        manifest = to_manifest(body)
        self.n += 1
        path = self.out / f"{self.n:03d}-{manifest['kind']}.json"
        path.write_text(json.dumps(manifest, indent=1, default=str))
        return body

    def create_namespaced_job(self, namespace: str, body: Any) -> Any:
        if body.metadata.name in self.reads:
            raise Conflict()
        self.reads[body.metadata.name] = 0
        return self._record(body)

    def create_namespaced_service(self, namespace: str, body: Any) -> Any:
        return self._record(body)

    def create_namespaced_custom_object(self, **kw: Any) -> Any:
        return self._record(kw["body"])

    def read_namespaced_job_status(self, name: str, namespace: str) -> Any:
        if name not in self.reads:
            raise NotFound()
        self.reads[name] += 1
        done = self.reads[name] > 1
        cond = [NS(type="Failed", status="True", reason="BackoffLimitExceeded",
                   message="Job has reached the specified backoff limit")] if done else []
        return NS(status=NS(active=0 if done else 1, failed=int(done), succeeded=0,
                            conditions=cond))

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        return NS(items=[])


def main() -> None:
    cfg = json.loads(sys.argv[1])
    fake = RecordingCluster(Path(cfg["out"]))
    control = ControlSettings(executor="kubernetes", k8s_image="registry.example/headrace:1",
                              k8s_namespace="ml", control_http_port=0,
                              k8s_trainer_env={"HEADRACE_MAX_EPOCHS": "50"})
    run_control(root=Path(cfg["root"]), conn=KafkaConnection(cfg["bootstrap"], timeout_s=15.0),
                topics=ControlTopics.with_prefix(cfg["prefix"]), tick_s=0.2,
                choice=ExecutorChoice(control, KubeApis(batch=fake, core=fake, custom=fake)),
                kafka_password_file=Path("/etc/headrace/kafka-sasl/password"))


if __name__ == "__main__":
    main()
