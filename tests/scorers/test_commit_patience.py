"""A commit the coordinator never answers is given up after ``commit_patience_s`` and the loop
goes back to polling (found on Apache Kafka: after the whole cluster restarted, a scorer retried
"Waiting for coordinator" for ever without polling, so it never rejoined its group, and did not
stop within its grace on SIGTERM). Its outputs are delivered: the next commit covers the offsets,
or the partitions' next owner reads them again."""

from __future__ import annotations

import threading
import time

from headrace.core.errors import RetriableError
from headrace.scorers.engine.metrics import ScorerMetrics
from headrace.scorers.engine.models import ModelHolder
from headrace.scorers.engine.outputs import Outputs
from headrace.scorers.engine.worker import Worker


class _NoCoordinator:
    """A ``StreamIO`` stand-in whose flushes succeed and whose commits wait for a coordinator
    that never comes; it stops the test after ``limit_s`` if the worker is still retrying."""

    def __init__(self, limit_s: float) -> None:
        self.commits = 0
        self.deadline = time.monotonic() + limit_s
        self.rewinds = 0
        self.holds = 0
        self.released = False

    def flush(self, timeout_s: float) -> None:
        pass

    def hold(self) -> None:
        self.holds += 1

    def release(self) -> None:
        self.released = True

    def commit(self, offsets: dict[tuple[str, int], int], *, consumed_at: int | None = None
               ) -> None:
        self.commits += 1
        if time.monotonic() > self.deadline:
            raise AssertionError(f"still retrying the commit after {self.commits} tries")
        raise RetriableError("commit failed: Commit failed: Local: Waiting for coordinator")


def test_a_commit_that_never_reaches_a_coordinator_is_given_up_and_the_loop_polls_again(
        ) -> None:
    io = _NoCoordinator(limit_s=3.0)
    worker = Worker(io=io, holder=ModelHolder(),  # type: ignore[arg-type]
                    metrics=ScorerMetrics(stream="nocoord", model="m"),
                    predictions_topic="predictions.nocoord", dlq_topic="dlq.nocoord",
                    batch_size=100, max_wait_s=0.1, grace_s=5.0, transactional=False,
                    stop=threading.Event())
    worker.commit_patience_s = 0.5
    t0 = time.monotonic()
    # Was: retried until the test's limit.
    worker._deliver(Outputs(), {("data.nocoord", 0): 42}, None)
    assert time.monotonic() - t0 < 2.5
    assert io.commits >= 2  # retried within its patience first
    # Each wait between tries kept the group membership; resumed once given up.
    assert io.holds == io.commits - 1 and io.released
    reg = worker.metrics.registry
    assert reg.get_sample_value("headrace_scorer_commits_total", {"stream": "nocoord"}) in (
        None, 0.0)  # not counted as a commit
