"""Distributed training with real processes on loopback: a TensorFlow all-reduce gang, a PyTorch
DDP gang and an MXNet parameter-server gang end with identical weights on every worker, publish
the chief's model, average the gradient (a 2-worker run's loss equals a 1-worker run's at the
same global batch), and survive a worker killed with SIGKILL by restarting the whole gang from
the last complete checkpoint (torch: to the weights of a gang never interrupted)."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from pathlib import Path

import pytest

from headrace.contracts import (
    Framework,
    JobEvent,
    JobEventKind,
    ModelSpec,
    Resources,
    TrainRequested,
)
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import checkpoints, jobs
from headrace.trainers.distributed.weights import checksums_in_log
from headrace.trainers.executors.base import JobOutcome, JobSpec
from headrace.trainers.executors.local import LocalExecutor

SPEC = ModelSpec(epochs=2, hidden=(16,), batch_size=32, learning_rate=0.01)
EPOCH_LOSS = re.compile(r"^(?:\[(w\d+)\] )?.*epoch (\d+)/\d+ step \d+: loss=([0-9.]+)", re.M)


def _submit(dfs: Path, demo: str, framework: str, *, workers: int, servers: int = 0,
            spec: ModelSpec = SPEC, **executor: object) -> tuple[str, LocalExecutor]:
    req = TrainRequested(idempotency_key=uuid.uuid4().hex, model_name=f"m{uuid.uuid4().hex[:6]}",
                         framework=framework, dataset_uri=demo, spec=spec,
                         resources=Resources(workers=workers, servers=servers))
    jid, _ = jobs.create_request(dfs, req)
    ex = LocalExecutor(root=dfs, **executor)  # type: ignore[arg-type]
    ex.submit(JobSpec(job_id=jid, model_name=req.model_name, framework=Framework(framework),
                      resources=req.resources))
    return jid, ex


def _until_done(ex: LocalExecutor, timeout: float = 240) -> list[JobOutcome]:
    deadline = time.monotonic() + timeout
    out: list[JobOutcome] = []
    while ex.active() and time.monotonic() < deadline:
        out += ex.poll()
        time.sleep(0.1)
    ex.close()
    return out


def _epoch_losses(log: str) -> dict[tuple[str, int], float]:
    return {(w or "single", int(e)): float(v) for w, e, v in EPOCH_LOSS.findall(log)}


def _exported_checksum(framework: str, path: Path) -> str:
    if framework == "tensorflow":
        from headrace.trainers.backends import tf_allreduce

        return tf_allreduce.exported_checksum(path)
    if framework == "torch":
        from headrace.trainers.backends import torch_ddp

        return torch_ddp.exported_checksum(path)
    from headrace.trainers.backends import mxnet_ps

    return mxnet_ps.exported_checksum(path)


def _two_identical_workers_published_once(dfs: Path, jid: str, ex: LocalExecutor,
                                           framework: str, servers: int
                                           ) -> tuple[str, versions.ModelVersion]:
    """The job succeeded, both workers logged the same weight checksum, the chief published
    exactly one version with those weights, recorded as distributed: (job log, version)."""
    [outcome] = _until_done(ex)
    log = jobs.log_path(dfs, jid).read_text()
    assert outcome.succeeded, log[-3000:]
    sums = checksums_in_log(log)
    assert set(sums) == {"w0", "w1"} and sums["w0"] == sums["w1"]
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.version is not None
    assert versions.list_versions(dfs, st.model_name) == [1]
    mv = versions.load_version(dfs, st.model_name, st.version)
    assert _exported_checksum(framework, mv.path) == sums["w0"]
    assert mv.manifest.extra["distributed"] == {
        "strategy": "parameter_server" if framework == "mxnet" else "allreduce",
        "workers": 2, "servers": servers}
    return log, mv


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "servers"), [("tensorflow", 0), ("mxnet", 1),
                                                    ("torch", 0)])
def test_two_workers_end_identical_publish_the_chiefs_model_and_average_the_gradient(
        dfs: Path, demo: str, framework: str, servers: int, broker: str, conn: KafkaConnection,
        topics: ControlTopics) -> None:
    jid, ex = _submit(dfs, demo, framework, workers=2, servers=servers, bootstrap=broker,
                      topic_prefix=topics.prefix, max_attempts=1)
    log, _ = _two_identical_workers_published_once(dfs, jid, ex, framework, servers)

    # Every worker's log lines are in the job log, prefixed, and its events name the worker.
    assert "[w1] " in log and "[w0] " in log
    events = read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
    mine = [e for e in events if e.job_id == jid and e.kind == JobEventKind.LOG]
    assert {e.worker for e in mine} == {0, 1}

    # The same data, seed and global batch on one worker: the same losses.
    single_jid, single = _submit(dfs, demo, framework, workers=1, max_attempts=1)
    [single_outcome] = _until_done(single)
    assert single_outcome.succeeded
    one = _epoch_losses(jobs.log_path(dfs, single_jid).read_text())
    two = _epoch_losses(log)
    for epoch in (1, 2):
        assert two[("w0", epoch)] == pytest.approx(one[("single", epoch)], rel=1e-3, abs=1e-4)
        assert two[("w1", epoch)] == two[("w0", epoch)]


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "servers"), [("tensorflow", 0), ("mxnet", 1),
                                                    ("torch", 0)])
def test_a_worker_killed_mid_epoch_restarts_the_gang_from_the_last_checkpoint(
        dfs: Path, demo: str, framework: str, servers: int) -> None:
    spec = SPEC.model_copy(update={"epochs": 30, "batch_size": 16,
                                   "checkpoint_every_steps": 5, "patience": 30})
    jid, ex = _submit(dfs, demo, framework, workers=2, servers=servers, spec=spec,
                      max_attempts=3, backoff_s=0.1)
    ckdir = jobs.checkpoints_dir(dfs, jid)
    deadline = time.monotonic() + 180
    killed_at: int | None = None
    while ex.active() and time.monotonic() < deadline:
        ex.poll()
        found = checkpoints.latest(ckdir)
        pids = ex.pids_of(jid)
        if found is not None and found[1].batch > 0 and "w1" in pids:  # mid-epoch
            killed_at = found[1].step
            os.kill(pids["w1"], signal.SIGKILL)
            break
        time.sleep(0.05)
    assert killed_at is not None, jobs.log_path(dfs, jid).read_text()[-2000:]
    [outcome] = _until_done(ex)
    log = jobs.log_path(dfs, jid).read_text()
    assert outcome.succeeded and outcome.attempts == 2, log[-3000:]
    attempt2 = log.split("--- attempt 2 ---")[1]
    resumed = [int(s) for s in re.findall(r"\[w(?:0|1)\] .*resumed from checkpoint at step (\d+)",
                                          attempt2)]
    assert len(resumed) == 2 and resumed[0] == resumed[1] and resumed[0] >= killed_at
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.state.value == "succeeded" and st.attempts == 2
    n_train = 240  # 300 rows, 20% validation
    assert st.step == spec.epochs * -(-n_train // spec.batch_size)  # the step never went back
    assert versions.list_versions(dfs, st.model_name) == [1]
    sums = checksums_in_log(attempt2)
    assert sums["w0"] == sums["w1"]
    if framework == "torch":  # bit-exact: the weights of a gang that was never interrupted
        whole, ex = _submit(dfs, demo, framework, workers=2, spec=spec, max_attempts=1)
        [outcome] = _until_done(ex)
        assert outcome.succeeded
        assert checksums_in_log(jobs.log_path(dfs, whole).read_text()) == sums


CNN = ModelSpec(model="cnn", epochs=2, filters=(8,), hidden=(16,), batch_size=32,
                learning_rate=0.01)


def _digit_tensors(dfs: Path, tmp_path: Path, rows: int = 300) -> str:
    """A few hundred digits as an (8, 8) fixed-shape tensor column, put on the DFS."""
    import pyarrow.parquet as pq

    from headrace.trainers.dataset_files import put_dataset
    from tests.trainers.families_data import digits_tensor_parquet

    whole = digits_tensor_parquet(tmp_path / "all.parquet")
    pq.write_table(pq.read_table(whole).slice(0, rows), tmp_path / "digits.parquet")
    return put_dataset(root=dfs, path=tmp_path / "digits.parquet", name="digits").uri


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "servers"), [("tensorflow", 0), ("mxnet", 1),
                                                    ("torch", 0)])
def test_two_workers_train_the_cnn_family_on_digit_tensors_to_identical_weights(
        dfs: Path, tmp_path: Path, framework: str, servers: int) -> None:
    # A family with a named (8, 8) tensor input, not the tabular "features": each worker
    # feeds its shard of the named input, and the chief publishes the cnn.
    uri = _digit_tensors(dfs, tmp_path)
    jid, ex = _submit(dfs, uri, framework, workers=2, servers=servers, spec=CNN, max_attempts=1)
    _, mv = _two_identical_workers_published_once(dfs, jid, ex, framework, servers)
    assert mv.manifest.family == "cnn"
    (inp,) = mv.manifest.input_signature()
    assert inp.name == "pixels" and inp.kind.value == "tensor" and inp.row_shape == (8, 8)
    assert mv.manifest.metrics["accuracy"] > 0.3  # 2 epochs on 240 rows: learning, not luck


@pytest.mark.slow
@pytest.mark.parametrize("frozen", ["s0", "w1"])
def test_a_frozen_parameter_server_or_worker_is_noticed_and_the_gang_restarted(
        dfs: Path, demo: str, frozen: str) -> None:
    spec = SPEC.model_copy(update={"epochs": 20, "batch_size": 16,
                                   "checkpoint_every_steps": 5,
                                   "patience": 20})  # no early stop before the freeze
    watchdog_s = 4.0
    retries: list[tuple[int, str]] = []
    jid, ex = _submit(dfs, demo, "mxnet", workers=2, servers=1, spec=spec, max_attempts=3,
                      backoff_s=0.1, watchdog_s=watchdog_s,
                      on_retry=lambda _j, n, why, _d: retries.append((n, why)))
    ckdir = jobs.checkpoints_dir(dfs, jid)
    deadline = time.monotonic() + 180
    stopped_at: float | None = None
    while ex.active() and time.monotonic() < deadline:
        ex.poll()
        found = checkpoints.latest(ckdir)
        pids = ex.pids_of(jid)
        if found is not None and found[1].step >= 10 and frozen in pids:
            os.kill(pids[frozen], signal.SIGSTOP)  # wedged, not dead: no exit code ever
            stopped_at = time.monotonic()
            break
        time.sleep(0.05)
    assert stopped_at is not None, jobs.log_path(dfs, jid).read_text()[-2000:]
    restarted_after = None
    while ex.active() and time.monotonic() < deadline:
        ex.poll()
        if "--- attempt 2 ---" in jobs.log_path(dfs, jid).read_text():
            restarted_after = time.monotonic() - stopped_at
            break
        time.sleep(0.05)
    # Within the watchdog time (+ the heartbeat's 1 s granularity and the restart backoff).
    assert restarted_after is not None and restarted_after < watchdog_s + 3, restarted_after
    [outcome] = _until_done(ex)
    log = jobs.log_path(dfs, jid).read_text()
    assert outcome.succeeded and outcome.attempts == 2, log[-3000:]
    assert "watchdog: hung: w" in log and "made no training step for" in log
    [(n, why)] = retries  # the reason the control plane puts on events.jobs and status.json
    assert n == 2 and re.match(r"hung: w[01] made no training step for \d+s \(watchdog 4s\)",
                               why), why
    st = jobs.read_status(dfs, jid)
    assert st is not None and st.attempts == 2
    assert "resumed from checkpoint" in log.split("--- attempt 2 ---")[1]
    assert versions.list_versions(dfs, jobs.read_status(dfs, jid).model_name) == [1]  # type: ignore[union-attr]
