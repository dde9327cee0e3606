"""``-f torch`` with the defaults: a job on the real filesystem learns iris, stops early and
restores its best epoch, writes its curve, passes the chance gate and publishes a ``torch.export``
version the store verifies; ``pytorch`` is the same framework; what torch cannot run, and a
code model that is no ``nn.Module``, are refused with one line."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import CodeRef, Framework, ModelSpec, TrainRequested, parse
from headrace.store import code, versions
from headrace.store.dfs import job_dir
from headrace.store.manifest import MODEL_FORMATS
from headrace.trainers import jobs
from headrace.trainers.dataset_files import put_dataset
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from tests.trainers import families_data as fd
from tests.trainers.test_families import assert_reload_reproduces_metrics, one_thread


def test_the_defaults_learn_iris_stop_early_and_publish_a_verified_torch_export(
        dfs: Path, tmp_path: Path) -> None:
    one_thread("torch")
    uri = put_dataset(root=dfs, path=fd.tabular_csv(tmp_path / "iris.csv", "iris")).uri
    # No hyperparameter set: this claims the defaults work.
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="iris",
                         framework="pytorch", dataset_uri=uri, spec=ModelSpec())
    assert req.framework == Framework.TORCH
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK, jobs.read_status(dfs, jid)

    mv = versions.resolve(dfs, "iris@production")  # promoted: the gate (chance) passed
    m = mv.manifest
    assert m.framework == Framework.TORCH and m.model_format == MODEL_FORMATS[Framework.TORCH]
    # 26 of 30: a scaled logistic regression gets 27 on this split (test_families)
    assert m.metrics["accuracy"] >= 0.85, m.metrics
    assert {"model.pt2", "metrics.json", "drift_profile.json"} <= set(m.files)
    training = m.extra["training"]
    assert training["stopped_because"] == "early_stopping", training
    assert 0 < training["best_epoch"] < len(training["epochs"])  # restored, not the last
    curve = json.loads((job_dir(dfs, jid) / "history.json").read_text())
    assert len(curve["epochs"]) == len(training["epochs"])
    assert m.extra["gate"]["passed"]
    assert_reload_reproduces_metrics(dfs, mv, req.spec)  # the best epoch's weights


def test_a_tampered_torch_export_is_refused_when_loaded(dfs: Path, tmp_path: Path) -> None:
    from tests.scorers.torch_models import pt_tensor

    mv = pt_tensor(dfs, "grid")
    with open(mv.path / "model.pt2", "r+b") as f:  # one byte changed after publishing
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(versions.IntegrityError, match=r"model\.pt2"):
        versions.load_version(dfs, "grid", mv.version)


def _request(framework: str, **resources: int) -> dict[str, object]:
    return {"idempotency_key": "k", "model_name": "m", "framework": framework,
            "dataset_uri": "d.parquet", "spec": {"model": "text"}, "resources": resources}


def test_pytorch_names_torch_and_parameter_servers_are_refused_with_one_line(
        dfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(TrainRequested, _request("pytorch")).framework == Framework.TORCH
    code_ = main(["--dfs-root", str(dfs), "train", "m", "-f", "torch", "-d", "d.parquet",
                  "--workers", "2", "--servers", "1", "--strategy", "parameter_server"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code_ != 0 and len(err) == 1, err
    assert "PyTorch with strategy parameter_server is not supported" in err[0]


NOT_A_MODULE = """
def build(spec, inputs):
    return "a string"
"""


def test_code_that_builds_no_nn_module_fails_the_job_permanently(dfs: Path, demo: str,
                                                                 tmp_path: Path) -> None:
    pkg = tmp_path / "pkg" / "bad_net"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(NOT_A_MODULE)
    cv = code.push(dfs, tmp_path / "pkg", "bad-net")
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="bad", framework="torch",
                         dataset_uri=demo,
                         spec=ModelSpec(model=CodeRef(code=cv.ref, entrypoint="bad_net.net:build")))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason is not None
    assert "returned str, not a torch.nn.Module" in st.reason
    assert versions.list_versions(dfs, "bad") == []


RAISES_IN_FORWARD = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(3, 2)  # the dataset has more features: forward raises

    def forward(self, x):
        return self.out(x)


def build(spec, inputs):
    return Net()
"""


def test_code_whose_forward_raises_fails_permanently_naming_its_line(
        dfs: Path, demo: str, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg" / "shape_net"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(RAISES_IN_FORWARD)
    cv = code.push(dfs, tmp_path / "pkg", "shape-net")
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name="shape",
                         framework="torch", dataset_uri=demo,
                         spec=ModelSpec(model=CodeRef(code=cv.ref,
                                                      entrypoint="shape_net.net:build")))
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason is not None
    assert st.reason.startswith(f"code {cv.ref}: forward() raised RuntimeError"), st.reason
    assert "shape_net/net.py:11" in st.reason and st.attempts == 1
