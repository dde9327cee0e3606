"""Which gang a request gets, what each local member is told, and the gang-aware job lock:
fast, no framework started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.core.errors import ConfigError, RetriableError, ValidationFailed
from headrace.trainers import jobs
from headrace.trainers.api import build_request
from headrace.trainers.distributed.gang import member_specs
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.distributed.plan import GangPlan, plan_for
from headrace.trainers.job_process import _locked
from tests.trainers.conftest import request


@pytest.mark.parametrize(("framework", "strategy", "workers", "servers", "expected"), [
    ("tensorflow", "auto", 1, 0, GangPlan("single")),
    ("tensorflow", "auto", 4, 0, GangPlan("allreduce", 4, 0)),
    ("mxnet", "auto", 2, 0, GangPlan("parameter_server", 2, 1)),  # one server by default
    ("mxnet", "parameter_server", 2, 3, GangPlan("parameter_server", 2, 3)),
    ("tensorflow", "allreduce", 1, 0, GangPlan("allreduce", 1, 0)),
])
def test_auto_is_allreduce_for_tensorflow_and_parameter_servers_for_mxnet(
        framework: str, strategy: str, workers: int, servers: int, expected: GangPlan) -> None:
    assert plan_for(framework=framework, strategy=strategy, workers=workers,
                    servers=servers) == expected


@pytest.mark.parametrize(("framework", "strategy", "servers", "message"), [
    ("tensorflow", "parameter_server", 1, "TensorFlow with strategy parameter_server is not "
                                          "supported"),
    ("mxnet", "allreduce", 0, "MXNet with strategy allreduce is not supported"),
    ("tensorflow", "allreduce", 2, "strategy allreduce takes no parameter servers"),
])
def test_combinations_that_cannot_run_are_refused_in_one_line(
        framework: str, strategy: str, servers: int, message: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        build_request(model_name="m", framework=framework, dataset_uri="d.parquet", workers=2,
                      servers=servers, strategy=strategy)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_each_local_tensorflow_worker_gets_the_same_cluster_and_its_own_index() -> None:
    specs = member_specs(GangPlan("allreduce", 2), worker_argv=["w"], ps_argv=["p"], cpus=2)
    assert [s.tag for s in specs] == ["w0", "w1"]
    configs = [json.loads(s.env["TF_CONFIG"]) for s in specs]
    assert configs[0]["cluster"] == configs[1]["cluster"]
    assert len(set(configs[0]["cluster"]["worker"])) == 2
    assert [c["task"]["index"] for c in configs] == [0, 1]
    # Two workers on two cores: one thread each.
    assert {s.env["OMP_NUM_THREADS"] for s in specs} == {"1"}
    assert {s.env["TF_NUM_INTRAOP_THREADS"] for s in specs} == {"1"}
    assert [GangMember.from_env(s.env).index for s in specs] == [0, 1]


def test_a_local_parameter_server_gang_has_a_scheduler_servers_and_workers_on_one_root() -> None:
    specs = member_specs(GangPlan("parameter_server", 2, 1), worker_argv=["w"],
                         ps_argv=["p"], cpus=4)
    assert [(s.tag, s.env["DMLC_ROLE"], list(s.argv)) for s in specs] == [
        ("w0", "worker", ["w"]), ("w1", "worker", ["w"]), ("sched", "scheduler", ["p"]),
        ("s0", "server", ["p"])]
    assert len({(s.env["DMLC_PS_ROOT_URI"], s.env["DMLC_PS_ROOT_PORT"]) for s in specs}) == 1
    assert {(s.env["DMLC_NUM_WORKER"], s.env["DMLC_NUM_SERVER"]) for s in specs} == {("2", "1")}
    assert specs[0].env["MXNET_CPU_WORKER_NTHREADS"] == "2"


def test_a_bad_gang_environment_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid gang environment"):
        GangMember.from_env({"HEADRACE_WORKER_INDEX": "x"})


def test_the_chief_holds_the_job_lock_and_each_worker_its_own(dfs: Path, demo: str) -> None:
    jid, _ = jobs.create_request(dfs, request(demo))
    chief = GangMember(index=0, workers=2, strategy="allreduce")
    worker = GangMember(index=1, workers=2, strategy="allreduce")
    with _locked(dfs, jid, chief), _locked(dfs, jid, worker):  # both members of one gang
        with pytest.raises(RetriableError, match="lock held"):
            _locked(dfs, jid, GangMember()).__enter__()  # a second chief: another attempt
        with pytest.raises(RetriableError, match=r"lock held\) \(worker 1\)"):
            _locked(dfs, jid, worker).__enter__()


def test_jobs_show_records_the_strategy_and_gang_size(dfs: Path, demo: str) -> None:
    from typer.testing import CliRunner

    from headrace.cli import app

    req = build_request(model_name="m", framework="mxnet", dataset_uri=demo, workers=2,
                        servers=1, idempotency_key="gang-show")
    jid, _ = jobs.create_request(dfs, req)
    res = CliRunner().invoke(app, ["--dfs-root", str(dfs), "jobs", "show", jid],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "parameter_server: 2 workers, 1 parameter servers" in res.output
