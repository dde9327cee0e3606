"""The promotion gate: a model worse on one class than production (on the same validation
rows) is kept but not promoted; a better one is promoted. Plus thresholds from the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from headrace.contracts import JobEventKind, ModelPublished, ModelSpec, Task
from headrace.contracts.gates import Gate, load_gates
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.evaluation import Evaluation, baseline, evaluate
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.gate import check
from headrace.trainers.job_process import run_job
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
    assert held and "demo:2 refused: " in held[0].message and held[0].reason.startswith("refused: ")


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


def _shuffled(dfs: Path) -> str:
    import numpy as np
    import pyarrow.parquet as pq

    from headrace.trainers.datasets import make_demo

    path = make_demo(out=dfs / "datasets" / "big.parquet", rows=2000, seed=4)
    table = pq.read_table(path)
    labels = np.random.default_rng(7).permutation(table.column("label").to_numpy())
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label",
                                    pa.array(labels)), dfs / "datasets" / "shuffled.parquet")
    return "datasets/shuffled.parquet"


def test_the_default_gate_holds_back_a_model_of_shuffled_labels_and_says_it_was_the_baseline(
        dfs: Path, conn: KafkaConnection, topics: ControlTopics) -> None:
    shuffled = _shuffled(dfs)
    useless = _run(dfs, shuffled, conn, topics, GOOD)  # no gates file: the default gate
    st = jobs.read_status(dfs, useless)
    assert st is not None and st.version == 1 and st.promoted is False
    # Balanced classes: chance is 1/3; the model is not above it with confidence, and its log
    # loss does not beat the uniform or class-frequency predictors'.
    assert st.gate_reasons and all(r.startswith("baseline: ") for r in st.gate_reasons)
    assert any("not above the trivial rate" in r or "class-frequency predictor" in r
               for r in st.gate_reasons), st.gate_reasons
    assert st.result == "refused" and st.reason == "; ".join(st.gate_reasons)
    reason = "; ".join(st.gate_reasons)
    gate = versions.load_version(dfs, "demo", 1).manifest.extra["gate"]
    assert gate["held_by"] == ["baseline"] and 0.25 < gate["baseline_metrics"]["accuracy"] < 0.4
    assert versions.read_alias(dfs, "demo") is None
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.kind == "succeeded" and e.job_id == useless for e in evs))
    [done] = [e for e in events if e.job_id == useless and e.kind == JobEventKind.SUCCEEDED]
    assert done.reason == "refused: " + reason and "demo:1 refused: baseline:" in done.message

    good = _run(dfs, "datasets/big.parquet", conn, topics, GOOD)  # the real labels
    st = jobs.read_status(dfs, good)
    assert st is not None and st.promoted is True and st.gate_reasons == []
    assert versions.read_alias(dfs, "demo").version == 2  # type: ignore[union-attr]


def test_the_baseline_rule_for_regressors_and_a_gates_file_that_changes_it(dfs: Path) -> None:
    base = Evaluation({"rmse": 2.0, "r2": 0.0})
    near = Evaluation({"rmse": 1.95, "r2": 0.05})  # 2.5% better (no per-row errors: no test)
    assert check(Gate(), near, baseline=base).passed
    worse = check(Gate(), Evaluation({"rmse": 2.1}), baseline=base)
    assert worse.reasons == ["baseline: rmse 2.1000 does not beat the mean predictor's "
                             "2.0000 by 0% (needs <= 2.0000)"]
    assert worse.held_by == ["baseline"]
    (dfs / "config").mkdir()
    (dfs / "config" / "gates.yaml").write_text(
        "default:\n  baseline: {rmse: 0.05}\nmodels:\n  free:\n    baseline: null\n"
        "  demo:\n    min: {accuracy: 0.5}\n")
    assert check(load_gates(dfs, "other"), near, baseline=base).reasons == [
        "baseline: rmse 1.9500 does not beat the mean predictor's 2.0000 by 5% "
        "(needs <= 1.9000)"]
    assert check(load_gates(dfs, "free"), Evaluation({"rmse": 3.0}), baseline=base).passed
    # An entry that does not mention the baseline keeps the default rule: 52 of 100 right on
    # two balanced classes is not above 0.5 with confidence.
    y = np.repeat([0, 1], 50)
    pred = np.where(np.arange(100) < 52, y, 1 - y)
    probs = np.eye(2, dtype=np.float32)[pred] * 0.5 + 0.25
    ev = evaluate(task=Task.CLASSIFIER, outputs=probs, y=y, classes=("0", "1"))
    demo = check(load_gates(dfs, "demo"), ev,
                 baseline=baseline(task=Task.CLASSIFIER, y_train=y, y_val=y, classes=("0", "1")))
    assert demo.held_by == ["baseline"]
    assert "one-sided binomial" in demo.reasons[0]
