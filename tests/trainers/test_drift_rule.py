"""The ``kind: drift`` rule: DriftDetected records on the real broker (as scorers publish them)
become exactly one TrainRequested per drift episode, keyed ``drift:<rule>:<episode>``; two
scorers, a replay and a control-plane restart inside an episode still give one."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.contracts import DriftDetected, Framework, JobEventKind, Task, TrainRequested
from headrace.core.errors import ConfigError
from headrace.store import versions
from headrace.store.manifest import Manifest
from headrace.streams.clients import KafkaConnection, make_producer
from headrace.streams.producing import send_events
from headrace.streams.reading import Record, iter_records, read_events
from headrace.streams.topics import ControlTopics
from headrace.trainers import jobs
from headrace.trainers.control import ControlPlane
from headrace.trainers.control.drift_rule import DriftRule
from headrace.trainers.control.triggers import load_triggers
from headrace.trainers.executors.local import LocalExecutor
from tests.fixtures import eventually
from tests.trainers.conftest import stop, wait_events

REQUEST = {"model_name": "demo", "framework": "mxnet", "dataset_uri": "datasets/missing.parquet"}


def drift(feature: str, drifting: bool, *, scorer: str = "scorer-0", version: int = 1,
          consecutive: int | None = None, model: str = "demo", stream: str = "clicks",
          window: int = 1) -> DriftDetected:
    return DriftDetected(
        stream=stream, model_name=model, model_version=version, feature=feature,
        statistic="psi", value=0.4 if drifting else 0.01, threshold=0.12, drifting=drifting,
        window=window, consecutive=(1 if drifting else 0) if consecutive is None else consecutive,
        rows=100, scorer=scorer)


def write_triggers(path: Path, **rule: Any) -> Path:
    path.write_text(yaml.safe_dump({"rules": [{
        "name": "drifted", "kind": "drift", "stream": "clicks", "request": REQUEST, **rule}]}))
    return path


def publish(conn: KafkaConnection, topics: ControlTopics, *events: DriftDetected) -> None:
    send_events(conn, topics.drift, events, key_of=lambda e: e.key().decode())


def requested(conn: KafkaConnection, topics: ControlTopics) -> list[tuple[str, str, str | None]]:
    return [(r.idempotency_key, r.trigger.kind.value, r.trigger.slot)
            for r in read_events(conn, topics.train_requests, TrainRequested, idle_s=0.5)]


class Plane:
    """The control plane's drift side in this process: records read back from the broker
    (their real offsets), folded into a dict table as the faust agent would."""

    def __init__(self, conn: KafkaConnection, dfs: Path, topics: ControlTopics,
                 triggers: Path) -> None:
        self.conn, self.topics = conn, topics
        self.plane = ControlPlane(root=dfs, conn=conn, executor=LocalExecutor(root=dfs),
                                  topics=topics, triggers=load_triggers(triggers))
        self.table: dict[str, Any] = {}
        self.read = 0  # records of events.drift folded so far

    def records(self) -> list[Record]:
        return list(iter_records(self.conn, self.topics.drift, idle_s=0.5))

    def catch_up(self) -> list[str]:
        """Fold every record not folded yet; the keys of the requests it sent."""
        fired: list[str] = []
        recs = self.records()
        for rec in recs[self.read:]:
            fired += [r.idempotency_key for r in self.plane.on_drift(rec, self.table)]
        self.read = len(recs)
        return fired


@pytest.fixture
def plane(conn: KafkaConnection, dfs: Path, topics: ControlTopics, tmp_path: Path
          ) -> Iterator[Callable[..., Plane]]:
    made: list[Plane] = []

    def make(**rule: Any) -> Plane:
        p = Plane(conn, dfs, topics, write_triggers(tmp_path / "t.yaml", **rule))
        made.append(p)
        return p

    yield make
    for p in made:
        p.plane.close()


def test_one_request_per_episode_across_two_scorers_and_many_windows(
        conn: KafkaConnection, topics: ControlTopics, plane: Callable[..., Plane]) -> None:
    p = plane()
    publish(conn, topics, drift("f0", False), drift("f0", True, scorer="scorer-0"),
            drift("f0", True, scorer="scorer-1"), drift("f1", True, scorer="scorer-1"))
    assert p.catch_up() == ["drift:drifted:1"]
    # Still drifting (more windows, both scorers) and one scorer back: the same episode.
    publish(conn, topics, drift("f0", True, consecutive=2), drift("f0", True, consecutive=3,
                                                                  scorer="scorer-1"),
            drift("f0", False, scorer="scorer-1"), drift("f1", False, scorer="scorer-1"),
            drift("f0", True, consecutive=4))
    assert p.catch_up() == []
    # Every feature back on every scorer: the episode ends; drift again is episode 2.
    publish(conn, topics, drift("f0", False))
    assert p.catch_up() == []
    assert p.table["drifted"]["active"] is False
    publish(conn, topics, drift("f1", True, scorer="scorer-1"), drift("f1", True, consecutive=2,
                                                                       scorer="scorer-1"))
    assert p.catch_up() == ["drift:drifted:2"]
    assert requested(conn, topics) == [("drift:drifted:1", "drift", "1"),
                                       ("drift:drifted:2", "drift", "2")]
    req = read_events(conn, topics.train_requests, TrainRequested)[0]
    assert (req.model_name, req.dataset_uri, req.trigger.source) == (
        "demo", REQUEST["dataset_uri"], "drifted")


def test_records_folded_again_after_a_redelivery_fire_nothing(
        conn: KafkaConnection, topics: ControlTopics, plane: Callable[..., Plane]) -> None:
    p = plane()
    publish(conn, topics, drift("f0", True), drift("f0", False), drift("f0", True))
    assert p.catch_up() == ["drift:drifted:1", "drift:drifted:2"]
    # faust redelivers from an older committed offset: the table already holds these.
    for rec in p.records():
        assert p.plane.on_drift(rec, p.table) == []
    assert [k for k, _, _ in requested(conn, topics)] == ["drift:drifted:1", "drift:drifted:2"]


def test_min_windows_features_and_model_filter_what_starts_an_episode(
        conn: KafkaConnection, topics: ControlTopics, plane: Callable[..., Plane]) -> None:
    p = plane(features=["f0"], min_windows=3, model="demo")
    publish(conn, topics,
            drift("f1", True, consecutive=9),  # not a feature of the rule
            drift("f0", True, consecutive=5, model="other"),  # another model
            drift("f0", True, consecutive=5, stream="orders"),  # another stream
            drift("f0", True, consecutive=1), drift("f0", True, consecutive=2))
    assert p.catch_up() == []
    publish(conn, topics, drift("f0", True, consecutive=3))
    assert p.catch_up() == ["drift:drifted:1"]


def test_without_a_production_alias_the_newest_version_counts_and_starts_clean(
        conn: KafkaConnection, topics: ControlTopics, plane: Callable[..., Plane]) -> None:
    p = plane()
    publish(conn, topics, drift("f0", True, version=1))
    assert p.catch_up() == ["drift:drifted:1"]
    # The retrained version 2 is on the stream: episode 1 is over, and v2's drift is new.
    publish(conn, topics, drift("f0", False, version=2), drift("f0", True, version=1,
                                                               consecutive=2))
    assert p.catch_up() == []
    assert p.table["drifted"]["active"] is False
    assert p.table["drifted"]["versions"] == {"demo": 2}
    publish(conn, topics, drift("f0", True, version=2))
    assert p.catch_up() == ["drift:drifted:2"]


def _publish_versions(root: Path, n: int) -> None:
    for _ in range(n):
        versions.publish(root, Manifest(
            name="demo", framework=Framework.MXNET, task=Task.CLASSIFIER, features=("f0",),
            label="label", classes=("a", "b"), metrics={"accuracy": 0.9}),
            lambda d: (d / "weights.bin").write_bytes(b"\0" * 8))


def test_only_the_production_versions_drift_counts_through_promotions_and_rollbacks(
        conn: KafkaConnection, dfs: Path, topics: ControlTopics,
        plane: Callable[..., Plane]) -> None:
    _publish_versions(dfs, 3)
    versions.set_alias(dfs, "demo", 1)
    p = plane()
    publish(conn, topics, drift("f0", True, version=1))
    assert p.catch_up() == ["drift:drifted:1"]
    # A canary of version 3 drifts, and version 2 waits unpromoted: neither is production.
    publish(conn, topics, drift("f0", True, version=3), drift("f0", False, version=3),
            drift("f0", True, version=2))
    assert p.catch_up() == []
    assert p.table["drifted"]["active"] is True and p.table["drifted"]["versions"] == {
        "demo": 1}
    # Version 2 promoted: version 1's records are stale, version 2's drift is a new episode.
    versions.set_alias(dfs, "demo", 2)
    publish(conn, topics, drift("f0", True, version=1, consecutive=2))
    assert p.catch_up() == []
    publish(conn, topics, drift("f0", True, version=2))
    assert p.catch_up() == ["drift:drifted:2"]
    # Rolled back to version 1, which still drifts: episode 3.
    versions.set_alias(dfs, "demo", 1)
    publish(conn, topics, drift("f0", True, version=2, consecutive=2),
            drift("f0", True, version=1, consecutive=3))
    assert p.catch_up() == ["drift:drifted:3"]
    assert [k for k, _, _ in requested(conn, topics)] == [
        "drift:drifted:1", "drift:drifted:2", "drift:drifted:3"]


def test_tombstones_and_unreadable_drift_records_are_skipped(
        conn: KafkaConnection, topics: ControlTopics, plane: Callable[..., Plane]) -> None:
    p = plane()
    prod = make_producer(conn)
    prod.produce(topics.drift, key=b"clicks|demo|1|f0", value=None)
    prod.produce(topics.drift, key=b"x", value=b"{not json")
    prod.flush(10)
    publish(conn, topics, drift("f0", True))
    assert p.catch_up() == ["drift:drifted:1"]


@pytest.mark.parametrize(("rule", "message"), [
    ({"kind": "drfit"}, "rules.0: kind must be one of: event, drift"),
    ({"min_windows": 0}, "rules.0.drift.min_windows: Input should be greater than or equal "
                         "to 1"),
    ({"every": 10}, "rules.0.drift.every: Extra inputs are not permitted"),
    ({"features": []}, "rules.0.drift.features: Tuple should have at least 1 item"),
    ({"request": {"model_name": "demo"}}, "trigger drifted: bad request template: "
                                          "framework: Field required"),
])
def test_a_bad_drift_rule_is_a_one_line_config_error(
        tmp_path: Path, rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_triggers(write_triggers(tmp_path / "t.yaml", **rule))
    assert len(str(err.value).splitlines()) == 1 and message in str(err.value)


def test_rules_without_a_kind_are_event_rules_and_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"rules": [
        {"name": "fresh", "stream": "clicks", "every": 10, "request": REQUEST},
        {"name": "drifted", "kind": "drift", "stream": "clicks", "request": REQUEST}]}))
    trig = load_triggers(path)
    assert [r.kind for r in trig.rules] == ["event", "drift"]
    assert [r.name for r in trig.of_kind(DriftRule)] == ["drifted"]
    path.write_text(yaml.safe_dump({"rules": [
        {"name": "same", "stream": "clicks", "every": 10, "request": REQUEST},
        {"name": "same", "kind": "drift", "stream": "clicks", "request": REQUEST}]}))
    with pytest.raises(ConfigError, match="two rules are named 'same'"):
        load_triggers(path)


# -- the control-plane process ------------------------------------------------------------

def _changelog(topics: ControlTopics, app_id: str) -> str:
    return f"{topics.prefix}-{app_id}-drift-episodes-changelog"


def _folded(conn: KafkaConnection, changelog: str) -> Iterator[dict[str, Any]]:
    for rec in iter_records(conn, changelog, idle_s=0.5):
        if rec.value:
            yield json.loads(rec.value)


def _wait_folded(conn: KafkaConnection, topics: ControlTopics, app_id: str,
                 proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Wait until the control plane's table holds every drift record produced so far."""
    end = len(list(iter_records(conn, topics.drift, idle_s=0.5)))
    rows: list[dict[str, Any]] = []

    def done() -> bool:
        assert proc.poll() is None, "the control plane exited"
        rows[:] = list(_folded(conn, _changelog(topics, app_id)))
        return bool(rows) and rows[-1]["offsets"].get("0", 0) >= end

    eventually(done, timeout_s=90, interval_s=0.5, what=f"drift records up to {end} folded")
    return rows[-1]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_the_control_plane_starts_one_job_per_episode_across_a_restart(
        conn: KafkaConnection, dfs: Path, topics: ControlTopics, tmp_path: Path,
        start_control: Callable[..., subprocess.Popen[bytes]], how: str) -> None:
    cfg = {"triggers": str(write_triggers(tmp_path / "t.yaml", min_windows=2)),
           "app_id": "drifty"}
    first = start_control(**cfg)
    # Two scorers of the stream see the same drift in their partitions.
    publish(conn, topics, drift("f0", True, scorer="a"), drift("f0", True, scorer="b"),
            drift("f0", True, scorer="a", consecutive=2),
            drift("f0", True, scorer="b", consecutive=2))
    job1 = jobs.job_id_for("drift:drifted:1")
    wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == job1 and e.kind == JobEventKind.FAILED for e in evs))
    row = _wait_folded(conn, topics, "drifty", first)
    assert row["active"] is True and row["episode"] == 1
    if how == "sigkill":  # no graceful shutdown: faust may not have committed what it read
        first.kill()
        first.wait()
    else:
        stop(first)

    # Restarted inside the episode: the table is recovered, the episode goes on.
    publish(conn, topics, drift("f0", True, scorer="a", consecutive=3),
            drift("f0", True, scorer="b", consecutive=3))
    second = start_control(**cfg)
    row = _wait_folded(conn, topics, "drifty", second)
    assert (row["active"], row["episode"]) == (True, 1)
    assert [k for k, _, _ in requested(conn, topics)] == ["drift:drifted:1"]
    # Both scorers back to normal: the episode ends; drift again starts episode 2.
    publish(conn, topics, drift("f0", False, scorer="a"), drift("f0", False, scorer="b"),
            drift("f0", True, scorer="b"), drift("f0", True, scorer="b", consecutive=2))
    job2 = jobs.job_id_for("drift:drifted:2")
    events = wait_events(conn, topics.jobs, lambda evs: any(
        e.job_id == job2 and e.kind == JobEventKind.FAILED for e in evs))
    _wait_folded(conn, topics, "drifty", second)
    assert requested(conn, topics) == [("drift:drifted:1", "drift", "1"),
                                       ("drift:drifted:2", "drift", "2")]
    for jid in (job1, job2):  # one job each, failed fast on the missing dataset
        kinds = [e.kind for e in events if e.job_id == jid]
        if how == "sigkill" and jid == job1:
            # The request read but not committed before the kill comes again: the router
            # says it is a duplicate (at most once) and runs nothing.
            assert kinds.count(JobEventKind.DUPLICATE) <= 1, (jid, kinds)
            kinds = [k for k in kinds if k != JobEventKind.DUPLICATE]
        assert kinds == [JobEventKind.QUEUED, JobEventKind.FAILED], (jid, kinds)
    assert sorted(d.name for d in (dfs / "jobs").iterdir()) == sorted([job1, job2])


def test_headrace_control_refuses_a_bad_drift_rule_in_one_line(
        broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from headrace.cli import main

    path = write_triggers(tmp_path / "t.yaml", min_windows="two")
    assert main(["--bootstrap", broker, "control", "--triggers", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rules.0.drift.min_windows" in err[0], err
