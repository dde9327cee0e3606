"""``headrace models shadow``: the RolloutState it publishes on the real broker, its one-line
refusals, and ``--stop``."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import Canary, RolloutRole, RolloutState, parse
from headrace.ops.rollout.control import current_rollout, publish_rollout, start_shadow
from headrace.store.versions import VersionNotFound
from headrace.streams.clients import KafkaConnection
from headrace.streams.topics import ControlTopics
from tests.fixtures import read_all
from tests.scorers.conftest import publish_tf


def _cli(broker: str, dfs: Path, topics: ControlTopics, *args: str) -> int:
    return main(["--bootstrap", broker, "--dfs-root", str(dfs), "models", "shadow", *args,
                 "--topic-prefix", topics.prefix])


def test_shadow_publishes_the_streams_state_keyed_by_stream_and_stop_clears_it(
        broker: str, conn: KafkaConnection, dfs: Path, topics: ControlTopics,
        capsys: pytest.CaptureFixture[str]) -> None:
    publish_tf(dfs, "m")
    publish_tf(dfs, "m", seed=1, alias=False)
    assert _cli(broker, dfs, topics, "m:2", "--stream", "s1") == 0
    assert "m:2 shadows production on stream s1" in capsys.readouterr().out
    recs = read_all(conn, topics.rollout)
    assert [r.key for r in recs] == [b"s1"]
    st = parse(RolloutState, recs[0].value or b"")
    assert (st.stream, st.model_name, st.candidate_version, st.role) == (
        "s1", "m", 2, RolloutRole.SHADOW)

    assert _cli(broker, dfs, topics, "m", "--stream", "s1", "--stop") == 0
    latest = current_rollout(conn, "s1", topics=topics)
    assert latest is not None and latest.candidate_version is None and latest.role is None


def test_shadow_of_a_missing_version_is_refused_in_one_line_and_publishes_nothing(
        broker: str, conn: KafkaConnection, dfs: Path, topics: ControlTopics,
        capsys: pytest.CaptureFixture[str]) -> None:
    publish_tf(dfs, "m")
    assert _cli(broker, dfs, topics, "m:7") != 0
    err = capsys.readouterr().err.strip()
    assert err == "headrace: invalid: model m has no version 7"
    assert _cli(broker, dfs, topics, "m@candidate") != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "NAME:VERSION" in err
    with pytest.raises(VersionNotFound):
        start_shadow(root=dfs, conn=conn, ref="nope:1", topics=topics)
    assert current_rollout(conn, "m", topics=topics) is None


def test_shadow_neither_clears_nor_replaces_a_canary(broker: str, conn: KafkaConnection, dfs: Path,
                                        topics: ControlTopics,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    publish_rollout(conn, topics, RolloutState(
        stream="s2", model_name="m", candidate_version=2, role=RolloutRole.CANARY,
        canary=Canary(percent=5, salt="x")))
    assert _cli(broker, dfs, topics, "m", "--stream", "s2", "--stop") != 0
    assert "runs a canary of m:2, not a shadow" in capsys.readouterr().err
    publish_tf(dfs, "m")
    assert _cli(broker, dfs, topics, "m:1", "--stream", "s2") != 0
    assert "runs a canary of m:2; stop it" in capsys.readouterr().err
    latest = current_rollout(conn, "s2", topics=topics)
    assert latest is not None and latest.role == RolloutRole.CANARY
