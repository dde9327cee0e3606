"""D46: a scorer in librdkafka's synchronous commit, its broker gone for good, obeys SIGTERM.

That commit has no deadline, and Python runs a signal handler only once the main thread is
back from C: a scorer whose loop ran on the main thread sat in it for 50 minutes after its
SIGTERM (gdb: ``rd_kafka_commit_queue`` -> ``rd_kafka_q_pop_serve``). Reproduced here with the
commit on the main thread: still alive 20 s after SIGTERM, on Tansu and on Apache Kafka. The
scorer now runs its loop off the main thread (``Scorer.run`` -> ``run_off_main``), so the
handler runs and its overdue exit ends the process after the grace, saying where it was.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from headrace.streams.broker import EmbeddedBroker
from tests.faults.harness import exit_note, new_stream
from tests.real_kafka import connection

CHILD = """
import sys, threading
from confluent_kafka import Consumer, TopicPartition
from headrace.core.off_main import run_off_main
from headrace.scorers.serving import install_signal_handlers
stop = threading.Event()
install_signal_handlers(stop, grace_s=1.0)
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2] + "-group",
              "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
c.subscribe([sys.argv[2]])
while True:  # a member of the group, with a record
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        break
print("consumed", flush=True)
sys.stdin.readline()  # the broker is gone for good now
def commit_to_a_gone_broker():
    print("committing", flush=True)
    c.commit(offsets=[TopicPartition(sys.argv[2], 0, m.offset() + 1)], asynchronous=False)
run_off_main(commit_to_a_gone_broker, name="scorer")  # as Scorer.run runs its loop
"""


def test_a_scorer_stuck_in_a_commit_to_a_gone_broker_exits_at_sigterm_saying_where(
        own_broker: EmbeddedBroker) -> None:
    stream = new_stream(connection(own_broker.bootstrap), partitions=1)
    producer = Producer({"bootstrap.servers": own_broker.bootstrap})
    producer.produce(stream.data, b"{}")
    assert producer.flush(15) == 0
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, own_broker.bootstrap, stream.data],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "consumed", exit_note(child.poll())
        own_broker.kill()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "committing", exit_note(child.poll())
        time.sleep(1.0)  # inside the commit
        assert child.poll() is None
        sent = time.monotonic()
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=10)
    assert child.returncode == 3, err[-3000:] + exit_note(child.returncode)
    assert took < 10, took
    assert "did not stop within 1s" in err, err[-3000:]
    assert "in commit_to_a_gone_broker" in err, err[-3000:]  # still in the commit at the end
