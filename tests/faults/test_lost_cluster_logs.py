"""A transactional scorer left running after its broker stopped: its log stays small, its client
instances stay the same few, its readiness says which broker is unreachable and why, and it still
stops on SIGTERM. Seen before: about 3,500 ERROR lines a minute (``Connect to ... failed:
Connection refused``) from three consumers and a producer, for 1 h 45 min.

The test owns its broker (an embedded Tansu), whatever HEADRACE_TEST_BROKER says."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from headrace.streams.broker import EmbeddedBroker
from headrace.streams.clients import KafkaConnection
from tests.faults.conftest import needs_scorer
from tests.faults.harness import ScorerProcess, Stream, ensure_stream_topics, publish_tiny_model

pytestmark = [pytest.mark.slow, needs_scorer]
WATCH_S = 20.0
# Per client and broker: a line on the first failure and at most one per 30 s after, plus one
# summary a minute; with ~4 clients, a few dozen at most (it was ~1,200 in 20 s).
MAX_LINES = 40
MAX_CLIENTS = 5  # data consumer, model-events follower, group-lag reader, producer, + 1 spare
CLIENT = re.compile(r"\[rdkafka#((?:consumer|producer)-\d+)\]")


def _readyz(s: ScorerProcess) -> dict[str, object]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{s.port}/readyz", timeout=2) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as exc:
        return dict(json.loads(exc.read()))


def test_a_scorer_whose_broker_is_gone_logs_a_few_lines_with_few_clients_and_says_why(
        own_broker: EmbeddedBroker, dfs: Path, tmp_path: Path) -> None:
    conn = KafkaConnection(bootstrap=own_broker.bootstrap, timeout_s=15.0)
    stream = Stream("flost", 3)
    ensure_stream_topics(conn, stream)
    publish_tiny_model(dfs, "mlost")
    s = ScorerProcess(stream=stream, model="mlost", bootstrap=own_broker.bootstrap, dfs=dfs,
                      log_dir=tmp_path, extra_env={"HEADRACE_SCORER_TRANSACTIONAL": "true"})
    try:
        s.wait_ready(timeout_s=180)
        time.sleep(2.0)
        start = len(s.log_path.read_text(errors="replace").splitlines())
        own_broker.stop()
        time.sleep(WATCH_S / 2)
        mid = len(s.log_path.read_text(errors="replace").splitlines())
        time.sleep(WATCH_S / 2)
        assert s.alive(), s.log_tail()
        lines = s.log_path.read_text(errors="replace").splitlines()
        during = lines[start:]
        clients_first = set(CLIENT.findall("\n".join(lines[start:mid])))
        clients_second = set(CLIENT.findall("\n".join(lines[mid:])))
        print(f"{len(during)} lines in {WATCH_S:.0f}s; clients "
              f"{sorted(clients_first | clients_second)}")
        assert len(during) <= MAX_LINES, "\n".join(during[-60:])
        assert len(clients_first | clients_second) <= MAX_CLIENTS, sorted(
            clients_first | clients_second)
        # No newer client instance in the second half: none is made again on each failure.
        newest = max((int(c.split("-")[1]) for c in clients_first), default=0)
        assert all(int(c.split("-")[1]) <= newest for c in clients_second), (
            clients_first, clients_second)
        assert any("unreachable" in ln for ln in during), "no summary line"
        body = _readyz(s)
        assert own_broker.bootstrap.split(":")[-1] in str(body.get("kafka")), body
        rc, took = s.terminate(timeout_s=40)
        assert rc == 0 and took < 40, (rc, took, s.log_tail())
    finally:
        if s.alive():
            s.kill9()
