from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headrace.core.errors import BrokerUnavailable
from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection, check_reachable, ensure_topics, list_topics
from headrace.streams.topics import TopicSpec
from tests.fixtures import eventually


def test_embedded_broker_answers_metadata_and_stops_cleanly(tmp_path: Path) -> None:
    b = EmbeddedBroker(log_path=tmp_path / "log").start()
    conn = KafkaConnection(b.bootstrap, timeout_s=5)
    check_reachable(conn)
    assert ensure_topics(conn, [TopicSpec("t1", 2, "x")]) == ["t1"]
    assert ensure_topics(conn, [TopicSpec("t1", 2, "x")]) == []  # idempotent
    assert list_topics(conn)["t1"] == 2
    b.stop()
    assert not b.running
    with pytest.raises(BrokerUnavailable, match="did not answer"):
        check_reachable(KafkaConnection(b.bootstrap, timeout_s=1))


@pytest.mark.slow
def test_headrace_broker_command_prints_address_and_exits_on_sigint(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path / "s")}
    proc = subprocess.Popen([sys.executable, "-c", "from headrace.cli import main; main()",
                             "broker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    line = proc.stdout.readline() if proc.stdout else ""  # blocks until started
    assert "listening on 127.0.0.1:" in line
    bootstrap = line.rsplit(" ", 1)[1].strip()
    check_reachable(KafkaConnection(bootstrap, timeout_s=5))
    assert "events.train-requests" in list_topics(KafkaConnection(bootstrap, timeout_s=5))
    proc.send_signal(2)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "memory only" in err and "broker stopped" in out
    def unreachable() -> bool:
        try:
            check_reachable(KafkaConnection(bootstrap, timeout_s=1))
        except BrokerUnavailable:
            return True
        return False

    eventually(unreachable, timeout_s=10, what="the stopped broker to be unreachable")
