"""A training job with ``HEADRACE_MLFLOW_TRACKING_URI`` set is an MLflow run on a real
tracking server: its parameters, a metric row an epoch, the gate's outcome, the published
version logged as an MLflow model and registered under the same name with the Headrace version
as a tag. With MLflow down the job still succeeds, and says so on events.jobs."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from headrace.contracts import JobEvent, JobEventKind, ModelSpec, TrainRequested
from headrace.core.ports import free_port
from headrace.imports.mlflow_rest import MlflowClient
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import history, jobs
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from headrace.trainers.run_log import RunLogSettings
from tests.trainers.test_families import one_thread

pytestmark = pytest.mark.slow
SPEC = ModelSpec(epochs=4, hidden=(16,), batch_size=32, learning_rate=0.01, patience=10)


def _job(dfs: Path, demo: str, name: str) -> str:
    one_thread("torch")
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name, framework="torch",
                         dataset_uri=demo, spec=SPEC)
    jid, _ = jobs.create_request(dfs, req)
    return jid


def test_a_training_job_is_an_mlflow_run_with_its_model_registered(
        dfs: Path, demo: str, mlflow_server, conn: KafkaConnection,
        topics: ControlTopics) -> None:
    name, experiment = "m" + uuid.uuid4().hex[:8], "e" + uuid.uuid4().hex[:8]
    jid = _job(dfs, demo, name)
    settings = RunLogSettings(mlflow_tracking_uri=mlflow_server.url,
                              mlflow_experiment=experiment)
    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics,
                   run_log=settings) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    mv = versions.load_version(dfs, name, st.version)
    hist = history.read(dfs, jid)

    c = MlflowClient.at(mlflow_server.url)
    exp = c.get("experiments/get-by-name", experiment_name=experiment)["experiment"]
    (run,) = c.post("runs/search", {"experiment_ids": [exp["experiment_id"]]})["runs"]
    info, data = run["info"], run["data"]
    tags = {t["key"]: t["value"] for t in data["tags"]}
    params = {p["key"]: p["value"] for p in data["params"]}
    assert info["status"] == "FINISHED" and tags["headrace.job_id"] == jid
    assert params["epochs"] == "4" and params["framework"] == "torch"
    assert params["dataset"] == demo
    assert tags["headrace.version"] == str(mv.version)
    gate = mv.manifest.extra["gate"]
    assert tags["headrace.gate.passed"] == str(gate["passed"]).lower()
    assert tags["headrace.outcome"] == st.result
    assert tags["headrace.manifest_sha256"] == mv.manifest_sha256

    # One metric row an epoch, as history.json holds them.
    got = c.get("metrics/get-history", run_id=info["run_id"], metric_key="val_loss")["metrics"]
    assert [int(m["step"]) for m in got] == [int(e["epoch"]) for e in hist.epochs]
    for m, e in zip(sorted(got, key=lambda m: m["step"]), hist.epochs, strict=True):
        assert m["value"] == pytest.approx(e["val_loss"], rel=1e-9)

    # Registered under the same name; the model's files on the server are the version's.
    found = c.get("model-versions/search", filter=f"name='{name}'")["model_versions"]
    assert len(found) == 1 and found[0]["run_id"] == info["run_id"]
    assert {t["key"]: t["value"] for t in found[0]["tags"]}["headrace.version"] == str(
        mv.version)
    stored = mlflow_server.root / "artifacts" / exp["experiment_id"] / info["run_id"]
    for rel, sha in mv.manifest.files.items():
        path = stored / "artifacts" / "model" / "version" / rel
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha, rel
    assert (stored / "artifacts" / "model" / "MLmodel").is_file()


def test_with_mlflow_down_the_job_succeeds_and_says_so_on_events_jobs(
        dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics) -> None:
    name = "m" + uuid.uuid4().hex[:8]
    jid = _job(dfs, demo, name)
    down = RunLogSettings(mlflow_tracking_uri=f"http://127.0.0.1:{free_port()}",
                          mlflow_retries=2, mlflow_timeout_s=2)
    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics,
                   run_log=down) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state.value == "succeeded" and st.version == 1
    events = read_events(conn, topics.jobs, JobEvent, idle_s=1.0)
    warned = [e.message for e in events
              if e.job_id == jid and e.kind == JobEventKind.LOG and "MLflow" in e.message]
    assert len(warned) == 1, warned  # said once; nothing more tried for the job
    assert "starting the run failed after 2 attempt(s)" in warned[0]
    assert "the job goes on without MLflow" in warned[0]
