"""``headrace schedule fire NAME`` (what a schedule's CronJob runs) publishes the slot's
TrainRequested with the key the control plane's own scheduler uses, so the control plane runs
one job however often, and by whom, the slot is fired."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from headrace.cli import main
from headrace.contracts import JobEventKind, TrainRequested
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.control.triggers import load_triggers, schedule_request
from tests.trainers.conftest import wait_events

SLOT = "2026-01-01T02:00:00Z"


@pytest.fixture
def triggers(tmp_path: Path) -> Path:
    path = tmp_path / "triggers.yaml"
    path.write_text(yaml.safe_dump({"schedules": [{
        "name": "nightly", "cron": "0 2 * * *",
        "request": {"model_name": "demo", "framework": "mxnet",
                    "dataset_uri": "datasets/missing.parquet"}}]}))
    return path


@pytest.mark.slow
def test_firing_a_slot_twice_runs_one_job_with_the_schedulers_key(
        broker: str, conn: KafkaConnection, topics: ControlTopics, triggers: Path,
        start_control: Callable[..., object], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADRACE_TRIGGERS", str(triggers))
    start_control()
    argv = ["--bootstrap", broker, "schedule", "fire", "nightly", "--at",
            "2026-01-01T02:30:00Z", "--topic-prefix", topics.prefix]
    assert main(argv) == 0
    assert main(argv) == 0
    key = f"schedule:nightly:{SLOT}"
    jid = jobs.job_id_for(key)
    assert f"fired for slot {SLOT} as job {jid}" in capsys.readouterr().out
    sent = read_events(conn, topics.train_requests, TrainRequested)
    assert [(r.idempotency_key, r.trigger.kind.value, r.trigger.slot) for r in sent] == [
        (key, "schedule", SLOT)] * 2
    # The control plane's scheduler builds the very same request key for that slot.
    [nightly] = load_triggers(triggers).schedules
    at = datetime(2026, 1, 1, 2, 59, tzinfo=UTC)
    assert schedule_request(nightly, at).idempotency_key == key
    events = wait_events(conn, topics.jobs, lambda evs: [e.kind for e in evs
                                                         if e.job_id == jid].count(
        JobEventKind.DUPLICATE) == 1, timeout=90)
    kinds = [e.kind for e in events if e.job_id == jid]
    assert kinds.count(JobEventKind.QUEUED) == 1 and JobEventKind.FAILED in kinds, kinds


@pytest.mark.parametrize(("argv", "message"), [
    (["schedule", "fire", "weekly"], "no schedule named 'weekly' in the triggers file "
                                     "(known: nightly)"),
    (["schedule", "fire", "nightly", "--at", "yesterday"], "--at: 'yesterday' is not an ISO"),
])
def test_fire_errors_are_one_line(
        broker: str, triggers: Path, argv: list[str], message: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADRACE_TRIGGERS", str(triggers))
    assert main(["--bootstrap", broker, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_fire_without_a_triggers_file_says_so(
        broker: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    monkeypatch.delenv("HEADRACE_TRIGGERS", raising=False)
    assert main(["--bootstrap", broker, "schedule", "fire", "nightly"]) == 2
    assert capsys.readouterr().err.strip() == (
        "headrace: error: no triggers file: set HEADRACE_TRIGGERS or --triggers")
