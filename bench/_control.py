"""A control plane for the tune benches: an embedded broker and ``headrace control`` (local
executor) in a subprocess on a scratch DFS, so every model is an ordinary job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import ControlTopics

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def control_plane(root: Path, parallel: int) -> Iterator[tuple[KafkaConnection, ControlTopics]]:
    """Yield (connection, topics) while a control plane runs ``parallel`` jobs per framework."""
    broker = EmbeddedBroker().start()
    conn = KafkaConnection(broker.bootstrap, timeout_s=15.0)
    topics = ControlTopics.with_prefix("b" + uuid.uuid4().hex[:8])
    ensure_topics(conn, topics.specs())
    env = {**os.environ, "HEADRACE_BOOTSTRAP": broker.bootstrap, "HEADRACE_DFS_ROOT": str(root)}
    ctl = subprocess.Popen(
        [sys.executable, "-c", "from headrace.cli import main; main()", "control",
         "--topic-prefix", topics.prefix, "--concurrency",
         f"tensorflow={parallel},mxnet={parallel}"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(8)  # the control plane joins its group and recovers its tables
        yield conn, topics
    finally:
        ctl.send_signal(signal.SIGTERM)
        ctl.wait(60)
        broker.stop()
