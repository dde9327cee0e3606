"""Every command that talks to control topics uses HEADRACE_TOPIC_PREFIX's namespace (issue 34:
`tune run` read only a hidden flag, so its trials went to another namespace's control plane).

Each command runs through ``main`` up to the call that would produce to (or read) the control
topics; that call is replaced by a recorder that keeps the topics it was given and stops the
command. No broker is needed: what is asserted is the namespace each command would use."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import _context, main
from headrace.core.errors import PermanentError
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from headrace.trainers.control.triggers import Triggers

SPACE = "learning_rate=log:1e-4:1e-2"
# (argv after the global options, "module:function" that receives the control topics)
COMMANDS: list[tuple[list[str], str]] = [
    (["train", "m", "-f", "tensorflow", "-d", "datasets/d.parquet"],
     "headrace.trainers.api:request_training"),
    (["tune", "run", "s", "-f", "tensorflow", "-d", "datasets/d.parquet", "--space", SPACE],
     "headrace.trainers.tuning:run_study"),
    (["tune", "s", "-f", "tensorflow", "-d", "datasets/d.parquet", "--space", SPACE],
     "headrace.trainers.tuning:run_study"),
    (["models", "promote", "m:2"], "headrace.trainers.api:promote_model"),
    (["models", "rollback", "m"], "headrace.trainers.api:rollback_model"),
    (["models", "shadow", "m:2"], "headrace.ops.rollout.control:start_shadow"),
    (["models", "canary", "m:2", "--stream", "s", "--percent", "5"],
     "headrace.ops.rollout.canary:publish_canary"),
    (["models", "compare", "m:1", "m:2", "--stream", "s"],
     "headrace.ops.rollout.live_evidence:compare"),
    (["lineage", "m:1"], "headrace.ops.lineage:scored_ranges"),
    (["schedule", "fire", "nightly"], "headrace.trainers.api:fire_schedule"),
    (["job", "run", "j-000000000000"], "headrace.trainers.job_process:run_job"),
    (["control"], "headrace.trainers.control.service:run_control"),
]


class _Stop(PermanentError):
    """Raised by the recorder: the command got as far as its Kafka call."""


def _recorder(seen: list[ControlTopics]) -> Any:
    def record(*args: Any, **kwargs: Any) -> Any:
        seen.extend(v for v in (*args, *kwargs.values()) if isinstance(v, ControlTopics))
        raise _Stop("recorded")
    return record


@pytest.fixture
def no_kafka(monkeypatch: pytest.MonkeyPatch, private_state: Path, tmp_path: Path) -> None:
    conn = KafkaConnection(bootstrap="127.0.0.1:9")
    monkeypatch.setattr(_context, "connection", lambda ctx: conn)

    @contextmanager
    def service_connection(where: Any) -> Iterator[KafkaConnection]:
        yield conn

    monkeypatch.setattr(_context, "service_connection", service_connection)
    # What runs before the Kafka call and needs a real DFS: checked elsewhere.
    monkeypatch.setattr("headrace.trainers.api.admit_request", lambda **kw: None)
    monkeypatch.setattr("headrace.trainers.tuning.check_study", lambda **kw: None)
    monkeypatch.setattr("headrace.ops.rollout.canary.plan_canary", lambda **kw: None)
    monkeypatch.setattr("headrace.trainers.control.triggers.load_triggers",
                        lambda path: Triggers())
    triggers = tmp_path / "triggers.yaml"
    triggers.write_text("schedules: []\n")
    monkeypatch.setenv("HEADRACE_TRIGGERS", str(triggers))
    monkeypatch.setenv("HEADRACE_DFS_ROOT", str(tmp_path / "dfs"))


@pytest.mark.parametrize(("argv", "target"), COMMANDS, ids=lambda v: "-".join(v)
                         if isinstance(v, list) else v.rpartition(":")[2])
def test_every_control_topic_command_honours_the_topic_prefix(
        argv: list[str], target: str, no_kafka: None, monkeypatch: pytest.MonkeyPatch) -> None:
    module, _, attr = target.partition(":")
    seen: list[ControlTopics] = []
    monkeypatch.setattr(f"{module}.{attr}", _recorder(seen))
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", "team-a")
    assert main(argv) != 0  # stopped by the recorder
    assert seen, f"{' '.join(argv)} never reached {target}"
    assert {t.prefix for t in seen} == {"team-a"}
    assert seen[0].train_requests == "team-a.events.train-requests"


def test_the_hidden_flag_still_wins(no_kafka: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ControlTopics] = []
    monkeypatch.setattr("headrace.trainers.tuning.run_study", _recorder(seen))
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", "team-a")
    main(["tune", "run", "s", "-f", "tensorflow", "-d", "d", "--space", SPACE,
          "--topic-prefix", "t1"])
    assert [t.prefix for t in seen] == ["t1"]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_control_rebuild_table_reaches_the_control_plane(
        how: str, no_kafka: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def record(**kwargs: Any) -> None:
        seen.append(kwargs["choice"].control)
        raise _Stop("recorded")

    monkeypatch.setattr("headrace.trainers.control.service.run_control", record)
    if how == "env":
        monkeypatch.setenv("HEADRACE_CONTROL_REBUILD_TABLE", "1")
    main(["control", *(["--rebuild-table"] if how == "flag" else [])])
    assert [c.control_rebuild_table for c in seen] == [True]
    seen.clear()
    monkeypatch.delenv("HEADRACE_CONTROL_REBUILD_TABLE", raising=False)
    main(["control"])
    assert [c.control_rebuild_table for c in seen] == [False]
