"""``headrace tune``: the search-space grammar, the pruning stop rule against a real study
journal, trials as Kubernetes Jobs (object test), and a study of 8 trials run by the real
control plane and local executor that survives the control plane being killed mid-study."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from headrace.cli import main
from headrace.contracts import (
    JobEvent,
    JobEventKind,
    JobState,
    ModelSpec,
    Resources,
    TrainRequested,
    Trigger,
    TriggerKind,
)
from headrace.core.errors import PermanentError, ValidationFailed
from headrace.store import versions
from headrace.streams.clients import KafkaConnection
from headrace.streams.reading import read_events
from headrace.streams.topics import ControlTopics
from headrace.topology.pod_security import manifest_violations
from headrace.topology.validation import validate_object
from headrace.trainers import history as job_history
from headrace.trainers import jobs, stop_rules, stopping
from headrace.trainers.executors.base import JobSpec, job_command
from headrace.trainers.executors.kubernetes import KubernetesExecutorConfig, job_spec_for
from headrace.trainers.executors.kubernetes_objects import training_job
from headrace.trainers.tuning import (
    StudyConfig,
    StudyResult,
    parse_space,
    pruning,
    run_study,
    show_study,
    storage,
    trial_key,
    trial_request,
)
from tests.fixtures import eventually
from tests.trainers.conftest import REPO

Start = Callable[..., subprocess.Popen[bytes]]
SPACE = "learning_rate=log:1e-3:1e-1 batch_size=16,32,64"


def config(dataset: str = "datasets/demo.parquet", **kw: Any) -> StudyConfig:
    base: dict[str, Any] = {"name": "st", "model_name": "tuned", "framework": "mxnet",
                            "dataset_uri": dataset, "epochs": 2, "space": SPACE,
                            "params": {"hidden": [16]}}
    return StudyConfig(**{**base, **kw})


# -- the space grammar ---------------------------------------------------------------------


def test_space_grammar_maps_to_optuna_distributions_and_spec_values() -> None:
    s = parse_space("learning_rate=log:1e-4:1e-2  batch_size=32,64,128 filters=16,32|32,64 "
                    "dropout=0:0.5 embedding_dim=log:8:64 activation=relu,tanh")
    d = s.distributions
    assert d["learning_rate"] == FloatDistribution(1e-4, 1e-2, log=True)
    assert d["batch_size"] == CategoricalDistribution((32, 64, 128))
    assert d["filters"] == CategoricalDistribution(("16,32", "32,64"))
    assert d["dropout"] == FloatDistribution(0.0, 0.5)
    assert d["embedding_dim"] == IntDistribution(8, 64, log=True)
    assert d["activation"] == CategoricalDistribution(("relu", "tanh"))
    assert s.spec_values({"filters": "32,64", "batch_size": 64}) == {
        "filters": [32, 64], "batch_size": 64}


@pytest.mark.parametrize(("text", "says"), [
    ("", "--space is empty"),
    ("lr=1e-3", "'lr' is not a searchable hyperparameter: use one of activation, batch_size"),
    ("epochs=1,2", "'epochs' is not a searchable hyperparameter"),
    ("batch_size", "'batch_size' is not KEY=VALUES"),
    ("batch_size=0,32", "0 is not a valid batch_size"),
    ("batch_size=32,32", "a choice is listed twice"),
    ("batch_size=8.5:64", "8.5 is not a valid batch_size"),
    ("learning_rate=log:0:1", "a log range needs a low bound above 0"),
    ("learning_rate=1e-2:1e-4", "the low bound must be below the high bound"),
    ("learning_rate=a:b", "the bounds of a range must be numbers"),
    ("learning_rate=log:1:2:3", "a range is LOW:HIGH or log:LOW:HIGH"),
    ("dropout=0:1.5", "1.5 is not a valid dropout"),
    ("filters=16,x|32", "'16,x' is not comma-separated integers"),
    ("activation=relu,swish", "'swish' is not a valid activation"),
    ("dropout=0:0.5 dropout=0.1,0.2", "'dropout' is given twice"),
])
def test_a_bad_space_is_refused_with_one_line(text: str, says: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        parse_space(text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_bad_space_or_param_before_connecting(
        dfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--dfs-root", str(dfs), "tune", "s1", "-f", "mxnet", "-d", "datasets/x.parquet"]
    assert main([*base, "--space", "lr=1"]) == 1
    assert main([*base, "--space", "batch_size=8,16", "-p", "width=3"]) == 1
    assert main([*base, "--space", "batch_size=8,16", "--pruner", "asha"]) == 1
    assert main([*base, "--space", "batch_size=8,16", "--metric", "rmse"]) == 1
    assert main([*base, "--space", "batch_size=8,16", "--model-name", "Bad"]) == 1
    assert main(["--dfs-root", str(dfs), "tune", "show", "nosuch"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "headrace: invalid: --space: 'lr' is not a searchable hyperparameter: use one of "
        "activation, batch_size, dropout, embedding_dim, filters, hidden, image_size, "
        "learning_rate, lr_schedule, max_length, max_tokens, patience",
        "headrace: invalid: TrainRequested: spec.width: Extra inputs are not permitted",
        "headrace: invalid: --pruner: Input should be 'median', 'hyperband' or 'none'",
        "headrace: invalid: metric 'rmse': a classifier reports loss, accuracy, macro_f1",
        "headrace: invalid: --model-name: invalid name 'Bad': use 1-63 of a-z 0-9 _ - starting "
        "with a letter or digit",
        "headrace: invalid: no study nosuch (no studies/nosuch/study.json)"]
    assert not (dfs / "studies" / "s1").exists()


def test_a_trial_is_an_ordinary_request_keyed_by_study_and_number() -> None:
    c = config()
    req = trial_request(c, parse_space(c.space), 3, {"learning_rate": 0.01, "batch_size": 32})
    assert req.idempotency_key == trial_key("st", 3) == "tune:st:3"
    assert (req.trigger.kind, req.trigger.source, req.trigger.slot) == (
        TriggerKind.TUNE, "st", "3")
    assert (req.spec.learning_rate, req.spec.batch_size, req.spec.hidden, req.spec.epochs) == (
        0.01, 32, (16,), 2)
    tuple_space = parse_space("filters=8|8,16")
    cnn = trial_request(config(model="cnn", params={}), tuple_space, 0, {"filters": "8,16"})
    assert cnn.spec.filters == (8, 16)


def test_a_resumed_study_must_search_the_same_space(dfs: Path) -> None:
    storage.write_config(dfs, config())
    assert storage.write_config(dfs, config()) == config()
    assert storage.write_config(dfs, config(params={"hidden": "16"})) == config()  # as -p gives
    with pytest.raises(PermanentError, match="study st exists with other settings"):
        storage.write_config(dfs, config(space="batch_size=16,32"))


def test_a_restarted_tune_tells_the_trials_that_ended_meanwhile_and_runs_none_twice(
        dfs: Path, conn: KafkaConnection, topics: ControlTopics) -> None:
    c = storage.write_config(dfs, config())
    study, space = storage.load_study(dfs, c), parse_space(c.space)
    ended = [(JobState.SUCCEEDED, {"loss": 0.25}, None), (JobState.SUCCEEDED, {"loss": 0.2},
             "pruned"), (JobState.FAILED, {}, None)]
    job_ids = []
    for state, metrics, stopped in ended:  # asked and published, then the tune process died
        t = study.ask(space.distributions)
        req = trial_request(c, space, t.number, t.params)
        jid, _ = jobs.create_request(dfs, req)
        jobs.write_status(dfs, jobs.initial_status(jid, req).model_copy(
            update={"state": state, "metrics": metrics, "version": t.number + 1}))
        if stopped:
            jobs.write_json(dfs / "jobs" / jid / "history.json", {"stopped_because": stopped})
        job_ids.append(jid)
    result = run_study(root=dfs, conn=conn, config=c, trials=3, parallel=2, topics=topics,
                       poll_s=0.05, promote_best=False)
    assert [(r.number, r.state, r.value, r.job_id, r.version) for r in result.trials] == [
        (0, "complete", 0.25, job_ids[0], 1), (1, "pruned", None, job_ids[1], 2),
        (2, "fail", None, job_ids[2], 3)]
    assert result.best is not None and result.best.number == 0
    assert read_events(conn, topics.train_requests, TrainRequested, idle_s=0.5) == []


def test_one_tune_process_drives_a_study_at_a_time(
        dfs: Path, conn: KafkaConnection, topics: ControlTopics) -> None:
    c = storage.write_config(dfs, config())
    with storage.runner_lock(dfs, "st"), pytest.raises(
            PermanentError, match="study st is being run by another `headrace tune`"):
        run_study(root=dfs, conn=conn, config=c, trials=1, topics=topics)
    assert storage.load_study(dfs, c).trials == []


# -- the pruning stop rule -------------------------------------------------------------------


FINISHED = ([1.0, 0.5, 0.3], [1.1, 0.6, 0.35], [0.9, 0.55, 0.3], [1.2, 0.7, 0.4])


def test_the_prune_rule_reports_each_epoch_and_prunes_a_trial_behind_the_median(
        dfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # patience 2: the median pruner judges a trial from its second epoch on
    c = storage.write_config(dfs, config(params={"hidden": [16], "patience": 2}))
    study = storage.load_study(dfs, c)
    space = parse_space(c.space)
    for curve in FINISHED:  # the sampler's four random trials, finished
        t = study.ask(space.distributions)
        for epoch, v in enumerate(curve, start=1):
            t.report(v, epoch)
        study.tell(t, curve[-1])
    good, bad = study.ask(space.distributions), study.ask(space.distributions)
    monkeypatch.setenv("HEADRACE_DFS_ROOT", str(dfs))

    def rules(number: int, **kw: Any) -> list[stopping.StopRule]:
        """The tune trial's prune rules (early stopping comes first, for every job)."""
        req = trial_request(c, space, number, {"learning_rate": 0.01, "batch_size": 32})
        return [r for r in stopping.rules_for(req.model_copy(update=kw), stop_rules.FACTORIES)
                if isinstance(r, pruning.PruneRule)]

    # The rule is listed with the stop rules the entry points pass and applies to tune trials
    # only.
    [rule] = rules(bad.number)
    manual = trial_request(c, space, 0, {}).model_copy(update={"trigger": Trigger()})
    assert not [r for r in stopping.rules_for(manual, stop_rules.FACTORIES)
                if isinstance(r, pruning.PruneRule)]
    assert not rules(bad.number, resources=Resources(workers=2))  # a gang could disagree
    [keep] = rules(good.number)
    # Epoch 1 is warm-up; then the bad trial is behind the median and is pruned.
    assert rule.after_epoch(1, {"loss": 2.0, "val_loss": 2.0}) is None
    assert rule.after_epoch(2, {"loss": 2.0, "val_loss": 1.9}) == "pruned"
    assert keep.after_epoch(1, {"val_loss": 0.9}) is None
    assert keep.after_epoch(2, {"val_loss": 0.4}) is None
    assert keep.after_epoch(3, {"accuracy": 0.9}) is None  # no val_loss: nothing to report
    # What the rule reported is in the journal on the DFS, seen by another reader.
    again = storage.load_study(dfs, c).trials
    assert again[bad.number].intermediate_values == {1: 2.0, 2: 1.9}
    assert again[good.number].intermediate_values == {1: 0.9, 2: 0.4}
    # A late re-run of a trial the study has been told about trains on, without error.
    study.tell(good.number, 0.4)
    assert keep.after_epoch(4, {"val_loss": 0.3}) is None


def test_the_median_pruner_waits_for_the_samplers_random_trials_and_the_patience(
        dfs: Path) -> None:
    """Early epochs rank slow starters below trials they end up beating: no trial is judged
    before it had the epochs early stopping would give it, nor against fewer than four
    finished trials (the sampler's random start)."""
    c = storage.write_config(dfs, config())  # the default patience: 10 epochs
    assert c.patience == ModelSpec.model_fields["patience"].default == 10
    study = storage.load_study(dfs, c)
    space = parse_space(c.space)

    def behind(epochs: int) -> bool:
        """Would a trial far behind every finished one, ``epochs`` in, be pruned?"""
        t = study.ask(space.distributions)
        for epoch in range(1, epochs + 1):
            t.report(9.0, epoch)
        pruned = t.should_prune()
        study.tell(t, state=TrialState.FAIL)
        return pruned

    long = [1.0 - 0.05 * e for e in range(12)]
    for n, curve in enumerate([long] * 4):
        assert not behind(12), f"pruned with {n} finished trials"
        t = study.ask(space.distributions)
        for epoch, v in enumerate(curve, start=1):
            t.report(v, epoch)
        study.tell(t, curve[-1])
    assert not behind(9)  # within the patience
    assert behind(10)


@pytest.mark.parametrize("entry", ["headrace job run", "python -m headrace.trainers"])
def test_each_way_a_job_runs_hands_it_the_listed_stop_rules(
        dfs: Path, demo: str, monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    """The job runner imports no tuning code (a contract): its entry points pass it
    trainers.stop_rules, so a trial far behind its study is pruned whichever way it runs."""
    c = storage.write_config(dfs, config(demo, epochs=8, params={"hidden": [16],
                                                                 "patience": 2}))
    study, space = storage.load_study(dfs, c), parse_space(c.space)
    for _ in FINISHED:  # the sampler's four random trials, finished far ahead of any real one
        t = study.ask(space.distributions)
        for epoch in range(1, 9):
            t.report(1e-6, epoch)
        study.tell(t, 1e-6)
    bad = study.ask(space.distributions)
    req = trial_request(c, space, bad.number, {"learning_rate": 0.01, "batch_size": 32})
    jid, _ = jobs.create_request(dfs, req)
    monkeypatch.setenv("HEADRACE_DFS_ROOT", str(dfs))  # the rule reads the job's settings
    monkeypatch.delenv("HEADRACE_BOOTSTRAP", raising=False)  # no events: the DFS tells it all
    if entry == "headrace job run":
        assert main(["--dfs-root", str(dfs), "job", "run", jid]) == 0
    else:
        proc = subprocess.run([sys.executable, "-m", "headrace.trainers", "run", jid],
                              capture_output=True, text=True, timeout=300, check=False,
                              cwd=REPO)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    h = job_history.read(dfs, jid)
    # Early stopping (patience 2) could stop no sooner than epoch 3: the pruner did.
    assert (h.stopped_because, len(h.epochs)) == ("pruned", 2)
    reported = storage.load_study(dfs, c).trials[bad.number].intermediate_values
    assert sorted(reported) == [1, 2]


def test_the_prune_rule_never_fails_a_job_when_the_study_is_gone(
        dfs: Path, caplog: pytest.LogCaptureFixture) -> None:
    rule = pruning.PruneRule(dfs, "gone", 0)
    assert rule.after_epoch(1, {"val_loss": 1.0}) is None
    assert rule.after_epoch(2, {"val_loss": 1.0}) is None
    assert "pruning off for this trial: study gone unreadable" in caplog.text


def test_listing_the_rule_costs_a_job_that_is_no_trial_no_optuna_import() -> None:
    code = ("import sys; import headrace.trainers.stop_rules; "
            "assert 'optuna' not in sys.modules, 'optuna imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_without_optuna_tune_says_which_extra_to_install(tmp_path: Path) -> None:
    (tmp_path / "optuna.py").write_text(
        "raise ModuleNotFoundError('No module named optuna', name='optuna')\n")
    code = "import sys; from headrace.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code, "--dfs-root", str(tmp_path), "tune",
                           "show", "s1"], capture_output=True, text=True, timeout=60,
                          check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"})
    assert (proc.returncode, proc.stderr) == (
        2, "headrace: error: headrace tune needs Optuna (pip install 'headrace[trainer]')\n")


# -- trials on Kubernetes --------------------------------------------------------------------


def test_a_trial_on_the_kubernetes_executor_is_an_ordinary_training_job() -> None:
    c = config(framework="tensorflow")
    req = trial_request(c, parse_space(c.space), 5, {"learning_rate": 0.01, "batch_size": 64})
    jid = jobs.job_id_for(req.idempotency_key)
    job = JobSpec(job_id=jid, model_name=req.model_name, framework=req.framework,
                  resources=req.resources, request_id=req.event_id, strategy=req.spec.strategy)
    obj = training_job(job_spec_for(job, KubernetesExecutorConfig(image="headrace:1")))
    manifest = validate_object(obj)  # the Kubernetes 1.30 schema and the restricted profile
    assert manifest["kind"] == "Job" and manifest_violations(manifest) == []
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    assert container["command"] == job_command(jid, python="python")
    assert manifest["metadata"]["labels"]["headrace.io/model"] == "tuned"
    assert {"name": "HEADRACE_JOB_ID", "value": jid} in container["env"]


# -- a study through the control plane ------------------------------------------------------


def _job_processes(job_ids: set[str]) -> list[int]:
    """Pids of job processes (started by the control plane this test started) of these jobs."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"headrace.trainers" in cmd and any(j.encode() in cmd for j in job_ids):
            pids.append(int(p.name))
    return pids


@pytest.mark.slow
def test_a_study_of_8_trials_survives_the_control_plane_killed_mid_study(
        broker: str, conn: KafkaConnection, dfs: Path, demo: str, topics: ControlTopics,
        start_control: Start, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {"app_id": "tune-router", "concurrency": {"mxnet": 2}, "max_attempts": 3}
    control = start_control(**cfg)
    c = config(demo, pruner="none")
    out: dict[str, StudyResult | BaseException] = {}

    def run() -> None:
        try:
            out["result"] = run_study(root=dfs, conn=conn, config=c, trials=8, parallel=2,
                                      topics=topics, poll_s=0.3, timeout_s=170)
        except BaseException as exc:  # handed to the test's thread
            out["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def finished() -> list[int]:
        if not (dfs / "studies" / "st" / "journal.log").exists():
            return []
        return [t.number for t in storage.load_study(dfs, c).get_trials(
            deepcopy=False, states=(TrialState.COMPLETE,))]

    def two_training() -> bool:
        # Killed while trials train, not while the control plane takes in a request: a kill
        # between a job's request.json and its status and table row leaves a job no control
        # plane resumes ("job directory already exists"), a control-plane matter of its own.
        if len(finished()) < 2:
            return False
        states = [jobs.read_status(dfs, d.name) for d in (dfs / "jobs").iterdir()]
        return None not in states and sum(
            s is not None and s.state.value == "running" for s in states) == 2

    eventually(two_training, timeout_s=120, interval_s=0.05, what="two trials training")
    done_before = finished()
    assert len(done_before) < 8, "the study ended before the control plane could be killed"
    # The control plane dies (SIGKILL: no offsets committed, no goodbye) and its machine
    # with it: the trial jobs it was running die too.
    control.send_signal(signal.SIGKILL)
    control.wait()
    all_jobs = {jobs.job_id_for(trial_key("st", n)) for n in range(8)}
    for pid in _job_processes(all_jobs):
        os.killpg(pid, signal.SIGKILL)
    start_control(**cfg)
    thread.join(timeout=180)
    result = out.get("result")
    assert isinstance(result, StudyResult), result

    # Every trial ended once, with its own job; nothing finished before the kill was lost.
    assert [t.number for t in result.trials] == list(range(8))
    assert [t.state for t in result.trials] == ["complete"] * 8, result.trials
    assert set(done_before) <= {t.number for t in result.trials if t.state == "complete"}
    assert {t.job_id for t in result.trials} == all_jobs
    statuses = {j: jobs.read_status(dfs, j) for j in all_jobs}
    for t in result.trials:
        st = statuses[t.job_id]
        assert st is not None and st.state.value == "succeeded"
        assert t.value == st.metrics["loss"] and t.version == st.version
        req = jobs.read_request(dfs, t.job_id)
        assert req.idempotency_key == trial_key("st", t.number)
        assert (req.spec.learning_rate, req.spec.batch_size) == (
            t.params["learning_rate"], t.params["batch_size"])
    # No trial ran twice: one version per trial job, one job per trial key, no other job.
    published = [versions.load_version(dfs, "tuned", v, verify=False).manifest.job_id
                 for v in versions.list_versions(dfs, "tuned")]
    assert sorted(str(j) for j in published) == sorted(all_jobs)
    assert {s.job_id for s in jobs.list_jobs(dfs)} == all_jobs
    events = read_events(conn, topics.jobs, JobEvent, idle_s=0.5)
    queued = [e.job_id for e in events if e.kind == JobEventKind.QUEUED]
    assert sorted(queued) == sorted(all_jobs)
    # The best trial is the lowest validation loss, and `tune show` says the same.
    best = min((t for t in result.trials), key=lambda t: (t.value or 0.0, t.number))
    assert result.best == best
    # Its version went through its own gate; the study's end makes it production.
    assert (result.promoted_best and result.notes == [
        f"tuned:{best.version} (best trial {best.number}) promoted to production"]) or \
        result.notes == [f"tuned:{best.version} (best trial {best.number}) is production"]
    pointer = versions.read_alias(dfs, "tuned")
    assert pointer is not None and pointer.version == best.version
    shown = show_study(root=dfs, name="st")
    assert shown.trials == result.trials and shown.best == best
    assert optuna.load_study(study_name="st", storage=storage.journal(dfs, "st")
                             ).best_trial.number == best.number
    # The CLI: the same study again runs nothing more; `tune show` lists every trial.
    capsys.readouterr()
    cli = ["--bootstrap", broker, "--dfs-root", str(dfs)]
    assert main([*cli, "tune", "st", "-f", "mxnet", "-d", demo, "--space", SPACE, "-p",
                 "hidden=16", "--epochs", "2", "--model-name", "tuned", "--pruner", "none",
                 "--trials", "8", "--parallel", "2", "--topic-prefix", topics.prefix]) == 0
    assert main([*cli, "tune", "show", "st"]) == 0
    runs = capsys.readouterr().out.split("study st: ")
    note = f"tuned:{best.version} (best trial {best.number}) is production\n"
    assert len(runs) == 3 and runs[1] == runs[2] + note, runs
    lines = runs[2].splitlines()
    assert lines[0] == f"mxnet mlp on {demo}, minimize loss, pruner none; space {SPACE}"
    rows = [ln.split() for ln in lines if re.match(r"\d+\*? +complete ", ln)]  # params fold
    assert [r[0] for r in rows] == [f"{n}{'*' if n == best.number else ''}" for n in range(8)]
    assert all(r[1] == "complete" and set(r) & all_jobs for r in rows), rows
    assert lines[-1].startswith(f"best: trial {best.number}, loss={best.value:.4g}, ")
    assert len(jobs.list_jobs(dfs)) == 8


# -- promotion: only the best trial, at the study's end ---------------------------------------


@pytest.mark.parametrize("framework", ["mxnet", "torch"])
def test_a_study_publishes_its_trials_and_promotes_only_the_best_at_its_end(
        dfs: Path, conn: KafkaConnection, demo: str, topics: ControlTopics,
        monkeypatch: pytest.MonkeyPatch, framework: str) -> None:
    """Issue 34: production moved v1 -> v6 -> v2 during a study (every trial that passed the
    gate was promoted in turn). The trials run in this process (the executor is not the
    point); the search, the gate and the promotion are the real ones."""
    from headrace.trainers import api
    from headrace.trainers.executors.base import ExitCode
    from headrace.trainers.job_process import run_job

    # A gate every trial passes (the test is about who promotes, not about the gate).
    (dfs / "config").mkdir()
    (dfs / "config" / "gates.yaml").write_text("default:\n  baseline: null\n")
    first = api.build_request(model_name="tuned", framework=framework, dataset_uri=demo,
                              epochs=1, idempotency_key="manual-v1")
    jid, _ = jobs.create_request(dfs, first)
    assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK
    assert versions.read_alias(dfs, "tuned").version == 1  # type: ignore[union-attr]
    production_during: list[int | None] = []

    def run_here(*, conn: KafkaConnection, request: TrainRequested, topics: ControlTopics,
                 durability: object = None) -> str:
        jid, _ = jobs.create_request(dfs, request)
        jobs.write_status(dfs, jobs.initial_status(jid, request))
        assert run_job(root=dfs, job_id=jid, conn=conn, topics=topics) == ExitCode.OK
        alias = versions.read_alias(dfs, "tuned")
        production_during.append(alias.version if alias else None)
        return jid

    monkeypatch.setattr(api, "request_training", run_here)
    result = run_study(root=dfs, conn=conn,
                       config=config(demo, pruner="none", epochs=1, framework=framework),
                       trials=3, topics=topics, poll_s=0.05, timeout_s=120)

    assert production_during == [1, 1, 1]  # no trial moved production
    assert [t.state for t in result.trials] == ["complete"] * 3
    for t in result.trials:
        st = jobs.read_status(dfs, t.job_id)
        assert st is not None and st.result == "kept" and st.promoted is False
        assert "a trial of study st" in st.gate_reasons[0]
    best = result.best
    assert best is not None and best.version is not None
    assert result.promoted_best and result.notes == [
        f"tuned:{best.version} (best trial {best.number}) promoted to production"]
    assert versions.read_alias(dfs, "tuned").version == best.version  # type: ignore[union-attr]
    # Production went v1 -> best, never through another trial.
    history = [p.version for p in versions.alias_history(dfs, "tuned")]
    assert history == [1, best.version], history
