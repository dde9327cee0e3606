"""The control plane's probes tell the truth about a dead agent.

The defect: the routing agent crashed on a fatal producer error (an exception the router did
not catch) while ``/livez`` and ``/readyz`` stayed green, and the train requests consumed after
it never ran. Now the process exits non-zero at once, before faust commits the record the agent
was on, so the restarted process routes it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.contracts import JobEventKind
from headrace.streams.clients import KafkaConnection
from headrace.streams.producing import send_events
from headrace.streams.reading import iter_records
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.control.health import ControlHealth
from tests.faults.harness import free_port
from tests.fixtures import eventually, http_get
from tests.trainers.conftest import request, wait_events

Start = Callable[..., subprocess.Popen[bytes]]


def probe(port: int, path: str) -> int | None:
    try:
        return http_get(port, path)[0]
    except OSError:  # not listening (yet, or any more)
        return None


def test_a_fatal_failure_fails_both_probes_with_its_reason_for_good() -> None:
    now = [0.0]
    h = ControlHealth(liveness_s=10, clock=lambda: now[0])
    h.tick(session=True)
    h.recovered = True
    assert h.live()[0] and h.ready()[0]
    assert h.fail("agent route crashed: KafkaException: out of order") is True
    assert h.fail("a second reason") is False  # the first one is kept (and logged once)
    h.tick(session=True)
    ok, live = h.live()
    assert not ok and live["problems"] == ["agent route crashed: KafkaException: out of order"]
    ok, ready = h.ready()
    assert not ok and ready["reason"] == "agent route crashed: KafkaException: out of order"


@pytest.mark.slow
def test_a_crashed_routing_agent_stops_the_control_plane_and_the_restart_routes_the_request(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start, tmp_path: Path) -> None:
    port = free_port()
    cfg = {"crash_once_file": str(tmp_path / "crashed"), "http_port": port}
    first = start_control(**cfg)
    eventually(lambda: probe(port, "/readyz") == 200, timeout_s=60, what="ready")
    req = request(demo, key="crash-1")
    send_events(conn, topics.train_requests, [req])
    # Old code: the agent died, the process and its probes stayed up (this timed out).
    rc = first.wait(60)
    assert rc == 2
    log = (tmp_path / "control-0.log").read_text(errors="replace")
    assert "agent route crashed" in log and "Out of order sequence number" in log
    second = start_control(**cfg)  # what Kubernetes does on the exit
    jid = jobs.job_id_for("crash-1")
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == jid and e.kind == JobEventKind.QUEUED for e in evs), timeout=60)
    assert next(e.kind for e in events if e.job_id == jid) == JobEventKind.QUEUED
    eventually(lambda: probe(port, "/livez") == 200, timeout_s=30, what="live")
    assert json.loads(http_get(port, "/readyz")[1])["ok"] is True and second.poll() is None


def test_a_bug_met_on_one_request_dead_letters_it_and_the_router_carries_on(
        conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start, tmp_path: Path) -> None:
    port = free_port()
    proc = start_control(crash_once_file=str(tmp_path / "crashed"), crash_kind="bug",
                         http_port=port)
    eventually(lambda: probe(port, "/readyz") == 200, timeout_s=60, what="ready")
    send_events(conn, topics.train_requests, [request(demo, key="bug-1"),
                                              request(demo, key="after-1")])
    after = jobs.job_id_for("after-1")
    wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == after and e.kind == JobEventKind.QUEUED for e in evs), timeout=60)
    [letter] = list(iter_records(conn, topics.train_requests_dlq, idle_s=1.0))
    assert b"unexpected KeyError" in (letter.header("dlq.error-message") or "").encode()
    assert proc.poll() is None and probe(port, "/livez") == 200
