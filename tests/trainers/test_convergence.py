"""Training to convergence: early stopping on validation loss restores the best epoch (what is
evaluated and published), the stop-rule seam stops a job with its reason, a resumed job keeps
its curve, the batch size follows the rows, the split is stratified; `jobs show` prints the
curve and `models list` the refused versions."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.cli import main
from headrace.contracts import ModelSpec, TrainRequested
from headrace.store import versions
from headrace.trainers import history, jobs, stopping
from headrace.trainers.datasets import load_dataset, make_demo, split
from headrace.trainers.executors.base import ExitCode
from headrace.trainers.job_process import run_job
from headrace.trainers.schedule import LearningRate, batch_size


def _job(dfs: Path, uri: str, spec: ModelSpec, name: str = "m") -> str:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=name, framework="mxnet",
                         dataset_uri=uri, spec=spec)
    jid, _ = jobs.create_request(dfs, req)
    return jid


def _shuffled(dfs: Path) -> str:
    path = make_demo(out=dfs / "datasets" / "noise.parquet", rows=300, features=8, seed=5)
    table = pq.read_table(path)
    labels = np.random.default_rng(5).permutation(table.column("label").to_numpy())
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label",
                                    pa.array(labels)), path)
    return "datasets/noise.parquet"


def test_early_stopping_publishes_the_best_epoch_and_the_cli_shows_curve_and_refusal(
        dfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Labels are noise: validation loss is best early and then grows as the net memorises.
    spec = ModelSpec(epochs=60, hidden=(64, 64), batch_size=16, learning_rate=0.01, patience=3)
    jid = _job(dfs, _shuffled(dfs), spec)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    h = history.read(dfs, jid)
    assert h.stopped_because == "early_stopping"
    run = len(h.epochs)
    assert run < 60 and h.best_epoch == run - 3
    assert [int(r["epoch"]) for r in h.epochs] == list(range(1, run + 1))
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None and st.result == "refused"
    mv = versions.load_version(dfs, "m", st.version)
    best = h.epochs[h.best_epoch - 1]
    # The published model is the best epoch's: its validation loss, not the last epoch's.
    assert mv.manifest.metrics["loss"] == pytest.approx(best["val_loss"], rel=1e-4)
    assert h.epochs[-1]["val_loss"] > best["val_loss"]
    assert mv.manifest.extra["training"] == h.record()

    assert main(["--dfs-root", str(dfs), "jobs", "show", jid]) == 0
    out = capsys.readouterr().out
    assert f"{run} epochs, best {h.best_epoch}, stopped: early_stopping, batch size 16" in out
    assert f"{h.best_epoch:>3} loss=" in out and "*best" in out
    assert "batch_size=16" in out and "learning_rate=0.01" in out
    assert main(["--dfs-root", str(dfs), "models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{st.version}: refused: baseline:" in out


class _StopAt:
    def __init__(self, epoch: int, reason: str) -> None:
        self.epoch, self.reason = epoch, reason
        self.seen: list[int] = []

    def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> str | None:
        assert {"loss", "val_loss", "val_accuracy"} <= set(metrics)
        self.seen.append(epoch)
        return self.reason if epoch >= self.epoch else None


def test_a_listed_stop_rule_stops_the_job_with_its_reason(dfs: Path, demo: str) -> None:
    rules: list[_StopAt] = []

    def prune(request: TrainRequested) -> _StopAt | None:
        if request.model_name != "pruned":
            return None
        rules.append(_StopAt(2, "pruned"))
        return rules[-1]

    jid = _job(dfs, demo, ModelSpec(epochs=20, hidden=(8,)), name="pruned")
    assert run_job(root=dfs, job_id=jid, conn=None, stop_rules=[prune]) == ExitCode.OK
    h = history.read(dfs, jid)
    assert (h.stopped_because, len(h.epochs)) == ("pruned", 2) and rules[0].seen == [1, 2]
    assert h.batch_size == 16  # none given: 240 training rows give 16 (32 steps or more)
    other = stopping.rules_for(TrainRequested(idempotency_key="k", model_name="other",
                                              framework="mxnet", dataset_uri="d"), [prune])
    assert [type(r).__name__ for r in other] == ["EarlyStopping"]


def test_a_resumed_job_keeps_its_curve_and_its_schedule(dfs: Path, demo: str) -> None:
    class Crash:
        def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> str | None:
            if epoch == 3:
                raise RuntimeError("killed after epoch 3's training")
            return None

    spec = ModelSpec(epochs=6, hidden=(8,), patience=2, learning_rate=0.05)
    jid = _job(dfs, demo, spec)
    assert run_job(root=dfs, job_id=jid, conn=None,
                   stop_rules=[lambda request: Crash()]) == ExitCode.RETRIABLE
    assert [int(r["epoch"]) for r in history.read(dfs, jid).epochs] == [1, 2]
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    h = history.read(dfs, jid)
    assert [int(r["epoch"]) for r in h.epochs] == list(range(1, len(h.epochs) + 1))
    assert h.stopped_because in ("early_stopping", "max_epochs")
    # The rates recorded are the schedule's over the recorded losses, across the resume.
    lr = LearningRate(spec)
    expected = []
    for row in h.epochs:
        expected.append(lr.rate)
        lr.after_epoch(row)
    assert [r["learning_rate"] for r in h.epochs] == expected


def test_the_batch_size_follows_the_rows_unless_given() -> None:
    auto = ModelSpec()
    assert [batch_size(auto, n) for n in (50, 200, 1437, 8192, 50_000)] == [16, 16, 32, 256, 256]
    assert batch_size(auto, 10) == 10  # never more than the rows
    assert batch_size(auto, 200, workers=32) == 32  # one row per worker at least
    assert batch_size(ModelSpec(batch_size=64), 1437) == 64
    assert batch_size(ModelSpec(batch_size=64), 40) == 40


def test_a_classifiers_validation_split_keeps_every_class_share(dfs: Path) -> None:
    y = np.repeat([0, 1, 2], [200, 50, 10])
    x = np.random.default_rng(0).normal(size=(260, 2)).astype(np.float32)
    pq.write_table(pa.table({"a": x[:, 0], "b": x[:, 1], "label": y}), dfs / "skew.parquet")
    ds = load_dataset(root=dfs, uri="skew.parquet", spec=ModelSpec())
    sp = split(ds, validation_split=0.2, seed=3)
    assert np.bincount(sp.y_val.astype(int)).tolist() == [40, 10, 2]
    assert np.bincount(sp.y_train.astype(int)).tolist() == [160, 40, 8]
    again = split(ds, validation_split=0.2, seed=3)
    assert np.array_equal(again.y_val, sp.y_val)  # deterministic by seed


def test_a_long_curve_prints_compactly_with_the_best_and_last_epochs() -> None:
    h = history.History()
    for e in range(1, 101):
        h.add({"epoch": float(e), "loss": 1 / e, "val_loss": abs(e - 37) / 100 + 0.1,
               "val_accuracy": 0.5, "learning_rate": 0.001})
    lines = h.curve().splitlines()
    assert len(lines) <= 20 and lines[0].startswith("  1 loss=1.0000 val_loss=0.4600")
    assert " 37 loss=0.0270 val_loss=0.1000 val_accuracy=0.5000 lr=0.001 *best" in lines
    assert lines[-1].startswith("100 ")


def test_a_retry_after_early_stopping_trains_no_more_epochs(
        dfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.trainers.job_run import publishing

    spec = ModelSpec(epochs=60, hidden=(64, 64), batch_size=16, learning_rate=0.01, patience=3)
    jid = _job(dfs, _shuffled(dfs), spec)

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("the DFS went away while publishing")

    monkeypatch.setattr(publishing, "publish", crash)
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.RETRIABLE
    first = history.read(dfs, jid)
    assert first.stopped_because == "early_stopping"
    monkeypatch.undo()
    assert run_job(root=dfs, job_id=jid, conn=None) == ExitCode.OK
    again = history.read(dfs, jid)
    assert again.record() == first.record()  # the same epochs, the same best: nothing re-run
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version == 1
