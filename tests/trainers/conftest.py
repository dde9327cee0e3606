"""Fixtures for the trainers: a demo dataset on the DFS, namespaced control topics, and a
control-plane process factory (the faust app needs its own main thread)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headrace.contracts import JobEvent, ModelSpec, TrainRequested
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from tests.fixtures import eventually

REPO = Path(__file__).resolve().parents[2]
TINY = ModelSpec(epochs=2, hidden=(16,), batch_size=32, learning_rate=0.01)


def request(dataset: str, *, key: str | None = None, framework: str = "mxnet",
            name: str = "demo", spec: ModelSpec = TINY) -> TrainRequested:
    return TrainRequested(idempotency_key=key or uuid.uuid4().hex, model_name=name,
                          framework=framework, dataset_uri=dataset, spec=spec)


def job_env(broker: str, dfs: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HEADRACE_BOOTSTRAP=broker, HEADRACE_DFS_ROOT=str(dfs), PYTHONUNBUFFERED="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    return env


@pytest.fixture
def start_control(broker: str, dfs: Path, topics: ControlTopics, tmp_path: Path
                  ) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(**cfg: Any) -> subprocess.Popen[bytes]:
        conf = {"root": str(dfs), "bootstrap": broker, "prefix": topics.prefix, **cfg}
        log = open(tmp_path / f"control-{len(procs)}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen([sys.executable, "-m", "tests.trainers.control_proc",
                              json.dumps(conf)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             env=job_env(broker, dfs))
        procs.append(p)
        return p

    yield start
    for p in procs:
        stop(p)


def stop(p: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_events(conn: KafkaConnection, topic: str, pred: Callable[[list[JobEvent]], bool],
                *, timeout: float = 90.0) -> list[JobEvent]:
    events: list[JobEvent] = []

    def met() -> bool:
        events[:] = read_events(conn, topic, JobEvent, idle_s=0.5)
        return pred(events)

    try:
        eventually(met, timeout_s=timeout, interval_s=0.5, what="the job events")
    except AssertionError:
        raise AssertionError(f"condition not met in {timeout}s; events: "
                             f"{[(e.job_id, e.kind.value, e.reason) for e in events]}") from None
    return events
