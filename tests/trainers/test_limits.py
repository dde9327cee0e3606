"""Operator caps on training requests (HEADRACE_MAX_*): refused where a request enters
(``headrace train``, the control plane: see test_control_plane) and again in the job; and
object-store dataset URIs that carry no endpoint override, query or credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import Resources, TrainRequested, parse
from headrace.core.errors import ValidationFailed
from headrace.core.settings import load_settings
from headrace.store.dfs import resolve_dataset
from headrace.trainers import jobs
from headrace.trainers.admission import admit
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from headrace.trainers.limits import OverCap, RequestCaps
from tests.trainers.conftest import TINY, request

BIG = (16384,) * 50


@pytest.mark.parametrize(("change", "expected"), [
    ({"spec": TINY.model_copy(update={"hidden": BIG})},
     "spec.hidden: 50 hidden layers is over the cap HEADRACE_MAX_LAYERS=32"),
    ({"spec": TINY.model_copy(update={"hidden": (16384, 16384)})},
     "spec.hidden: at least 268468224 parameters is over the cap "
     "HEADRACE_MAX_PARAMETERS=100000000"),
    ({"spec": TINY.model_copy(update={"epochs": 5000})},
     "spec.epochs: 5000 epochs is over the cap HEADRACE_MAX_EPOCHS=1000"),
    ({"resources": Resources(gpus=64)},
     "resources: 64 GPUs (64 per worker x 1) is over the cap HEADRACE_MAX_GPUS=8"),
    ({"resources": Resources(workers=256)},
     "resources.workers: 256 workers is over the cap HEADRACE_MAX_WORKERS=16"),
])
def test_the_default_caps_refuse_what_was_accepted_before_naming_the_cap(
        dfs: Path, demo: str, change: dict[str, object], expected: str) -> None:
    req = request(demo).model_copy(update=change)
    with pytest.raises(OverCap) as info:
        admit(req, root=dfs, caps=RequestCaps.from_settings(load_settings()))
    assert str(info.value) == expected


def test_headrace_train_refuses_a_request_over_a_cap_in_one_line_before_publishing(
        dfs: Path, demo: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADRACE_MAX_LAYERS", "2")
    monkeypatch.setenv("HEADRACE_BOOTSTRAP", "127.0.0.1:1")  # never reached
    code = main(["--dfs-root", str(dfs), "train", "demo", "-f", "mxnet", "-d", demo,
                 "--hidden", "8,8,8", "--no-wait"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err == ("headrace: invalid: spec.hidden: 3 hidden layers is over the cap "
                   "HEADRACE_MAX_LAYERS=2")
    assert not (dfs / "jobs").exists()


def test_the_job_checks_the_built_model_and_the_dataset_size_against_the_caps(
        dfs: Path, demo: str) -> None:
    jid, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=jid, conn=None,
                   caps=RequestCaps(max_parameters=100)) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason is not None
    # 32 features -> 16 -> 3 classes: 32*16+16 + 16*3+3 parameters.
    assert st.reason == ("the built model: 579 parameters is over the cap "
                         "HEADRACE_MAX_PARAMETERS=100")
    size = (dfs / demo).stat().st_size
    jid, _ = jobs.create_request(dfs, request(demo))
    assert run_job(root=dfs, job_id=jid, conn=None,
                   caps=RequestCaps(max_dataset_bytes=1000)) == ExitCode.PERMANENT
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.reason == (
        f"dataset '{demo}': {size} bytes is over the cap HEADRACE_MAX_DATASET_BYTES=1000")
    assert not (dfs / "models").exists()


@pytest.mark.parametrize("uri", [
    "s3://bucket/x.parquet?endpoint_override=169.254.169.254",
    "s3://bucket/x.parquet?region=us-east-1",
    "gs://bucket/x.parquet#frag",
    "s3://AKIA:secret@bucket/x.parquet",
])
def test_object_store_uris_carry_no_endpoint_override_query_or_credentials(
        dfs: Path, uri: str) -> None:
    data = request("d.parquet").model_dump(mode="json") | {"dataset_uri": uri}
    with pytest.raises(ValidationFailed, match=r"dataset_uri: .*must not carry a query"):
        parse(TrainRequested, data)
    with pytest.raises(ValidationFailed, match=r"must not carry a query"):
        resolve_dataset(dfs, uri)
    ok = data | {"dataset_uri": "s3://bucket/data/x.parquet"}
    assert parse(TrainRequested, ok).dataset_uri == "s3://bucket/data/x.parquet"
