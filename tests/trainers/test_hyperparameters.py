"""Every hyperparameter reaches the job: --batch-size, --learning-rate and -p land unchanged in
the request (and so in request.json and the manifest's spec); an unknown -p key is refused with
one line listing the family's valid keys; an option and a -p that disagree are refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import ModelSpec, TrainRequested
from headrace.core.errors import ValidationFailed
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.api import build_request
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job


def _req(**kw: object) -> TrainRequested:
    return build_request(model_name="m", framework="mxnet", dataset_uri="d.parquet",
                         **kw)  # type: ignore[arg-type]


def test_options_and_params_reach_the_spec_unchanged() -> None:
    req = _req(model="cnn", batch_size=48, learning_rate=0.003,
               params={"filters": "16,32", "image_size": "40,40", "dropout": "0.25",
                       "patience": "3"})
    s = req.spec
    assert (s.batch_size, s.learning_rate, s.filters, s.image_size, s.dropout, s.patience) == (
        48, 0.003, (16, 32), (40, 40), 0.25, 3)
    # -p batch_size / learning_rate are no longer overwritten by defaults.
    s = _req(params={"batch_size": "24", "learning_rate": "0.02", "hidden": "8"}).spec
    assert (s.batch_size, s.learning_rate, s.hidden) == (24, 0.02, (8,))
    # Nothing given: the defaults of a converging run (epochs a maximum, batch from the rows).
    s = _req().spec
    assert (s.epochs, s.batch_size, s.lr_schedule) == (100, None, "plateau")


def test_unknown_keys_and_contradictions_are_refused_with_one_line() -> None:
    with pytest.raises(ValidationFailed) as err:
        _req(model="text", params={"filters": "8"})
    assert str(err.value) == (
        "-p filters: not a hyperparameter of model text; valid: activation, batch_size, "
        "checkpoint_every_steps, drift_false_alarm_rate, drift_window, dropout, embedding_dim, "
        "epochs, hidden, learning_rate, "
        "lr_schedule, max_length, max_tokens, patience, seed, validation_split")
    with pytest.raises(ValidationFailed, match=r"^-p batch_size=64 contradicts --batch-size 32"):
        _req(batch_size=32, params={"batch_size": "64"})
    assert _req(batch_size=32, params={"batch_size": "32"}).spec.batch_size == 32


def test_the_cli_refuses_an_unknown_param_with_one_line(
        dfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--dfs-root", str(dfs), "train", "m", "-f", "mxnet", "-d", "d.parquet",
                 "-m", "cnn", "-p", "width=8"])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "-p width: not a hyperparameter of model cnn; valid: batch_size, " in err


def test_the_manifest_and_request_json_hold_the_spec_actually_used(dfs: Path, demo: str) -> None:
    req = _req(batch_size=32, learning_rate=0.02, epochs=2, params={"hidden": "8"})
    req = req.model_copy(update={"dataset_uri": demo, "idempotency_key": uuid.uuid4().hex})
    jid, _ = jobs.create_request(dfs, req)
    stored = json.loads((dfs / "jobs" / jid / "request.json").read_text())
    assert {k: stored["spec"][k] for k in ("batch_size", "learning_rate", "hidden")} == {
        "batch_size": 32, "learning_rate": 0.02, "hidden": [8]}
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    spec = ModelSpec.model_validate(versions.load_version(dfs, "m", st.version)
                                    .manifest.extra["spec"])
    assert spec == req.spec


def test_headrace_train_publishes_the_options_and_params_unchanged(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics) -> None:
    code = main(["--bootstrap", broker, "--dfs-root", str(dfs), "train", "m", "-f", "mxnet",
                 "-d", demo, "-m", "cnn", "--batch-size", "48", "--learning-rate", "0.003",
                 "-p", "filters=16,32", "-p", "image_size=40,40", "-p", "patience=4",
                 "--no-wait", "--topic-prefix", topics.prefix])
    assert code == 0
    [req] = read_events(conn, topics.train_requests, TrainRequested)
    s = req.spec
    assert (s.model, s.batch_size, s.learning_rate, s.filters, s.image_size, s.patience,
            s.epochs) == ("cnn", 48, 0.003, (16, 32), (40, 40), 4, 100)
