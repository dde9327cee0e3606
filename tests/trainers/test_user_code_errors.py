"""Your code's errors are yours: an exception in build() or at import fails the job at once
(permanent, one attempt) and `jobs logs` shows the full traceback with your file and line.
And your code receives its -p hyperparameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.contracts import Framework
from headrace.store import code, versions
from headrace.trainers import api, jobs
from headrace.trainers.executors.base import ExitCode, JobOutcome, JobSpec
from headrace.trainers.executors.local import LocalExecutor
from headrace.trainers.job_process import run_job
from tests.fixtures import eventually
from tests.trainers.conftest import REPO

BROKEN_BUILD = '''from mxnet import gluon


def helper(spec):
    return spec.hyperparameters["depth"] * 2  # line 5: KeyError, the user's bug


def build(spec, inputs):
    return gluon.nn.Dense(helper(spec))
'''
BROKEN_IMPORT = '''import math

RATIO = math.sqrt(-1)  # line 3: ValueError at import


def build(spec, inputs):
    raise AssertionError("never reached")
'''


def _push(dfs: Path, tmp: Path, name: str, source: str) -> str:
    pkg = tmp / name / "userpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(source)
    return code.push(dfs, tmp / name, name).ref


def _run(ex: LocalExecutor, jid: str) -> JobOutcome:
    out: list[JobOutcome] = []

    def finished() -> bool:
        out.extend(ex.poll())
        return not ex.active()

    ex.submit(JobSpec(job_id=jid, model_name="demo", framework=Framework.MXNET))
    eventually(finished, timeout_s=120, what="the job to finish")
    [outcome] = out
    return outcome


@pytest.mark.parametrize(("name", "source", "line", "what"), [
    ("broken-build", BROKEN_BUILD, 5, "build() raised KeyError: 'depth'"),
    ("broken-import", BROKEN_IMPORT, 3,
     "importing userpkg.model raised ValueError: math domain error"),
])
def test_an_exception_in_your_code_is_permanent_and_its_traceback_is_in_the_log(
        name: str, source: str, line: int, what: str, dfs: Path, demo: str,
        tmp_path: Path) -> None:
    ref = _push(dfs, tmp_path, name, source)
    req = api.build_request(model_name="demo", framework="mxnet", dataset_uri=demo, code=ref,
                            entrypoint="userpkg.model:build", epochs=1)
    jid, _ = jobs.create_request(dfs, req)
    outcome = _run(LocalExecutor(root=dfs, backoff_s=0.01, max_attempts=3), jid)
    assert not outcome.succeeded and outcome.attempts == 1
    assert outcome.exit_code == ExitCode.PERMANENT
    where = f"{ref}/userpkg/model.py"
    assert outcome.reason is not None and what in outcome.reason
    assert f"at {where}:{line}" in outcome.reason
    log = "\n".join(api.job_log(root=dfs, job_id=jid))
    assert "Traceback (most recent call last):" in log
    assert f'File "{where}", line {line}' in log, log


def test_your_code_receives_its_p_hyperparameters(dfs: Path, demo: str) -> None:
    ref = code.push(dfs, REPO / "examples" / "model_code", "tabular-net").ref
    req = api.build_request(model_name="demo", framework="mxnet", dataset_uri=demo, code=ref,
                            entrypoint="tabular_net.gluon_model:build", epochs=2,
                            params={"width": "8", "learning_rate": "0.01", "note": "a b"})
    assert req.hyperparameters == {"width": 8, "learning_rate": 0.01, "note": "a b"}
    assert req.spec.learning_rate == 0.01
    jid, _ = jobs.create_request(dfs, req)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    mv = versions.load_version(dfs, "demo", st.version)
    assert mv.manifest.extra["hyperparameters"] == req.hyperparameters
    assert mv.manifest.extra["spec"]["learning_rate"] == 0.01
    import mxnet as mx

    params = mx.nd.load(str(mv.path / "model-0000.params"))
    shapes = {k: v.shape for k, v in params.items()}
    # The first Dense layer is `width` wide over the demo's 32 features.
    assert any(s == (8, 32) for s in shapes.values()), shapes
    assert not np.isnan(mv.manifest.metrics["accuracy"])
