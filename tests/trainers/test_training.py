"""Training in one process, no control plane: both frameworks, both tasks, the exported
model reloads and predicts what it predicted before saving; bad input fails fast (exit 65)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.contracts import JobEventKind, ModelPublished, ModelSpec, Task
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.backends import get_backend
from headrace.trainers.datasets import load_dataset, make_demo, split
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.trainers.conftest import TINY, request, wait_events


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_each_framework_trains_checkpoints_publishes_and_reloads_the_same_predictions(
        framework: str, dfs: Path, demo: str, conn: KafkaConnection, topics: ControlTopics
) -> None:
    req = request(demo, framework=framework)
    jid, created = jobs.create_request(dfs, req)
    assert created
    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK

    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state == "succeeded" and st.version == 1 and st.promoted
    ckpts = sorted(int(p.name) for p in jobs.checkpoints_dir(dfs, jid).iterdir())
    assert ckpts and all((jobs.checkpoints_dir(dfs, jid) / str(s) / "COMPLETE").exists()
                         for s in ckpts)
    mv = versions.resolve(dfs, "demo@production")  # verifies every sha256
    files = set(mv.manifest.files)
    expected = ({"model.keras"} if framework == "tensorflow"
                else {"model-symbol.json", "model-0000.params"})
    assert expected | {"metrics.json", "confusion_matrix.png"} <= files
    m = mv.manifest
    assert m.features == tuple(f"f{i}" for i in range(32)) and m.classes == ("0", "1", "2")
    assert m.job_id == jid and m.trigger_event_id == req.event_id
    assert m.dataset is not None and len(m.dataset.fingerprint) == 64
    assert np.array(m.confusion_matrix).sum() == 60  # 20% of 300 rows
    assert json.loads((mv.path / "metrics.json").read_text())["metrics"] == m.metrics

    # The exported model predicts what the metrics were computed from: recompute them.
    ds = load_dataset(root=dfs, uri=demo, spec=req.spec)
    sp = split(ds, validation_split=req.spec.validation_split, seed=req.spec.seed)
    probs = get_backend(framework).load_exported(mv.path, task=Task.CLASSIFIER,
                                                 n_features=32).predict(sp.x_val)
    assert probs.shape == (60, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert float((probs.argmax(1) == sp.y_val).mean()) == pytest.approx(m.metrics["accuracy"])

    published = read_events(conn, topics.models, ModelPublished)
    assert [(p.model_name, p.version, p.action) for p in published] == [("demo", 1, "promoted")]
    assert published[0].manifest_sha256 == mv.manifest_sha256
    events = wait_events(conn, topics.jobs, lambda evs: any(e.kind == "succeeded" for e in evs))
    kinds = [e.kind for e in events]
    assert kinds.count(JobEventKind.PROGRESS) == 2 and kinds.count(JobEventKind.SUCCEEDED) == 1
    assert events[0].message.startswith("attempt 1 running")


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_a_regressor_outputs_one_value_per_row(framework: str, dfs: Path) -> None:
    make_demo(out=dfs / "reg.parquet", rows=200, task=Task.REGRESSOR)
    # Trained enough to beat the mean predictor by the default gate's 5% (else not promoted).
    spec = ModelSpec(task=Task.REGRESSOR, epochs=8, hidden=(16,), batch_size=32,
                     learning_rate=0.03)
    jid, _ = jobs.create_request(dfs, request("reg.parquet", framework=framework, spec=spec,
                                              name="reg"))
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    mv = versions.resolve(dfs, "reg@production")
    assert mv.manifest.classes == () and {"rmse", "mae", "r2"} <= set(mv.manifest.metrics)
    x = np.zeros((5, 32), dtype=np.float32)
    out = get_backend(framework).load_exported(mv.path, task=Task.REGRESSOR,
                                               n_features=32).predict(x)
    assert out.shape == (5, 1)


def _bad_parquet(path: Path) -> None:
    pq.write_table(pa.table({"f0": pa.array([{"a": 1}, {"a": 2}] * 10), "f1": pa.array([1.0] * 20),
                             "label": pa.array([0, 1] * 10)}), path)


@pytest.mark.parametrize(("uri", "expected"), [
    ("datasets/nope.parquet", "does not exist"),
    ("bad.parquet", "must be numeric, category, tensor, image or text: f0 (struct"),
    ("nolabel.parquet", "has no label column 'label'"),
])
def test_bad_datasets_fail_permanently_with_one_line_reason(dfs: Path, uri: str,
                                                            expected: str) -> None:
    _bad_parquet(dfs / "bad.parquet")
    pq.write_table(pa.table({"f0": pa.array([1.0] * 20)}), dfs / "nolabel.parquet")
    jid, _ = jobs.create_request(dfs, request(uri))
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason is not None and expected in st.reason
    assert "\n" not in st.reason
    assert versions.list_models(dfs) == []


def test_an_unknown_framework_is_rejected_with_one_line() -> None:
    from headrace.core.errors import ValidationFailed
    from headrace.trainers.api import build_request

    with pytest.raises(ValidationFailed, match=r"^TrainRequested: framework: "):
        build_request(model_name="demo", framework="caffe", dataset_uri="d.parquet")
    with pytest.raises(ValidationFailed, match="unknown framework 'caffe'"):
        get_backend("caffe")


def test_a_job_that_already_published_does_not_publish_twice(dfs: Path, demo: str) -> None:
    jid, _ = jobs.create_request(dfs, request(demo, spec=TINY))
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK  # a retry after a crash
    assert versions.list_versions(dfs, "demo") == [1]
