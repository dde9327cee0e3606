"""``headrace control`` processes of one test, on the test's Apache Kafka cluster: each with its
own log, ready once its ``/readyz`` answers 200, all stopped when the test ends; and the job
events the control planes published."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from headrace.contracts import JobEvent, JobEventKind
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from tests.fixtures import eventually, http_get
from tests.trainers.conftest import REPO, stop

CLI = [sys.executable, "-c", "import sys; from headrace.cli import main; "
       "sys.exit(main(sys.argv[1:]))", "control"]


class ControlPlanes:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self) -> subprocess.Popen[bytes]:
        """One more control plane; returns once it is ready."""
        n = len(self.procs)
        log = self.logs / f"control-{n}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen(CLI, cwd=REPO, env=self.env, stdout=out,
                                 stderr=subprocess.STDOUT)
        self.procs.append((p, log))

        def ready() -> bool:
            assert p.poll() is None, log.read_text()[-3000:]
            m = re.search(r"probes on port (\d+)", log.read_text())
            return m is not None and http_get(int(m.group(1)), "/readyz")[0] == 200

        eventually(ready, timeout_s=120, interval_s=0.5, what=f"control plane {n}")
        return p

    def last_log(self) -> str:
        return self.procs[-1][1].read_text()

    def stop_all(self) -> None:
        for p, _ in self.procs:
            stop(p)


def kinds(conn: KafkaConnection, topics: ControlTopics, jid: str) -> list[JobEventKind]:
    """The job's events as ``events.jobs`` holds them, its log lines left out."""
    return [e.kind for e in read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
            if e.job_id == jid and e.kind != JobEventKind.LOG]
