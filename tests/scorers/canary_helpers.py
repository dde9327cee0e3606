"""Canary test helpers: the predictions topic as (message, prediction) pairs, one prediction per
source record, the canary's role header, and the canary's audit events."""

from __future__ import annotations

import json
from typing import Any

from headrace.contracts import JobEvent, RolloutRole
from headrace.scorers.rollout.canary import ROLE_HEADER
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics, predictions_topic
from tests.fixtures import eventually, read_all

CONTROL = ControlTopics()  # the test settings carry no topic prefix


def wait_predictions(conn: KafkaConnection, stream: str, expect: int) -> list[tuple[Any, dict]]:
    msgs = eventually(lambda: (lambda got: got if len(got) >= expect else None)(
        read_all(conn, predictions_topic(stream))), timeout_s=60,
        what=f"{expect} predictions")
    return [(m, json.loads(m.value)) for m in msgs]


def one_each(preds: list[tuple[Any, dict]]) -> dict[tuple[int, int], dict]:
    by_source: dict[tuple[int, int], dict] = {}
    for _, p in preds:
        src = (p["source_partition"], p["source_offset"])
        assert src not in by_source, f"two predictions for {src}"
        by_source[src] = p
    return by_source


def is_canary(msg: Any) -> bool:
    return (ROLE_HEADER, RolloutRole.CANARY.value.encode()) in list(msg.headers or ())


def audit_events(conn: KafkaConnection, job_id: str) -> list[JobEvent]:
    return [e for e in read_events(conn, CONTROL.jobs, JobEvent, idle_s=0.5)
            if e.job_id == job_id]
