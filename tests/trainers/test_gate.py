"""The promotion gate: a model worse on one class than production (on the same validation
rows) is kept but not promoted; a better one is promoted. Plus thresholds from the file."""

from __future__ import annotations

from pathlib import Path

from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.contracts import JobEventKind, ModelPublished, ModelSpec
from headrace.streams.control_io import read_events
from headrace.streams.control_topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.evaluation import Evaluation
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.gate import Gate, check
from headrace.trainers.running import run_job
from tests.trainers.conftest import request, wait_events

GOOD = ModelSpec(epochs=3, hidden=(16,), batch_size=32, learning_rate=0.01)
POOR = ModelSpec(epochs=1, hidden=(1,), batch_size=256, learning_rate=1e-4, seed=3)


def _run(dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics,
         spec: ModelSpec) -> str:
    jid, _ = jobs.create_request(dfs, request(demo, spec=spec))
    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK
    return jid


def test_the_gate_blocks_a_model_worse_on_one_class_and_promotes_a_better_one(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics) -> None:
    (dfs / "config").mkdir()
    (dfs / "config" / "gates.yaml").write_text(
        "models:\n  demo:\n    max_regression: {accuracy: 0.02, class_recall: 0.05}\n")
    first = _run(dfs, demo, conn, topics, GOOD)
    poor = _run(dfs, demo, conn, topics, POOR)
    better = _run(dfs, demo, conn, topics, GOOD.model_copy(update={"epochs": 4}))

    st = jobs.read_status(dfs, poor)
    assert st is not None and st.version == 2 and st.promoted is False
    assert any(r.startswith("recall.") and "worse than production v1" in r
               for r in st.gate_reasons), st.gate_reasons
    kept = versions.load_version(dfs, "demo", 2)  # the version is kept, with why
    assert kept.manifest.extra["gate"]["passed"] is False
    assert kept.manifest.extra["gate"]["production_version"] == 1

    published = read_events(conn, topics.models, ModelPublished)
    assert [(p.version, p.previous_version, p.job_id) for p in published] == [
        (1, None, first), (3, 1, better)]
    assert versions.read_alias(dfs, "demo").version == 3  # type: ignore[union-attr]
    events = wait_events(conn, topics.jobs,
                         lambda evs: sum(e.kind == "succeeded" for e in evs) == 3)
    held = [e for e in events if e.job_id == poor and e.kind == JobEventKind.SUCCEEDED]
    assert held and "not promoted" in held[0].message and held[0].reason


def _ev(recalls: list[float], cm: list[list[int]]) -> Evaluation:
    metrics = {f"recall.{i}": r for i, r in enumerate(recalls)}
    metrics["accuracy"] = sum(recalls) / len(recalls)
    return Evaluation(metrics, cm, tuple(str(i) for i in range(len(recalls))))


def test_thresholds_on_class_recall_and_confusion_cells() -> None:
    cm = [[9, 1, 0], [0, 6, 4], [0, 0, 10]]
    ev = _ev([0.9, 0.6, 1.0], cm)
    gate = Gate.model_validate({
        "min": {"accuracy": 0.8}, "min_class_recall": 0.5, "class_recall": {"1": 0.7},
        "max_confusion": [{"true": "1", "predicted": "2", "max_fraction": 0.3}]})
    result = check(gate, ev)
    assert not result.passed
    assert result.reasons == ["recall of class 1 0.6000 < min 0.7000",
                              "40.0% of class 1 predicted as 2 > max 30.0%"]
    assert check(Gate(min={"accuracy": 0.8}), ev).passed
