"""`headrace models canary`: starts a canary on the stream's compacted state (a new salt each
time), `--stop` ends it, and every bad input is one line and a non-zero exit."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.contracts import RolloutRole
from headrace.ops.rollout.control import current_rollout
from headrace.streams.clients import KafkaConnection
from tests.scorers.conftest import publish_tf


@pytest.fixture
def model(dfs: Path) -> str:
    name = "m" + uuid.uuid4().hex[:8]
    publish_tf(dfs, name, seed=1)
    publish_tf(dfs, name, seed=2, alias=False)
    return name


def test_canary_starts_and_stops_on_the_streams_state(
        broker: str, dfs: Path, model: str, private_state: Path, conn: KafkaConnection,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap", broker, "--dfs-root", str(dfs), "models", "canary"]
    stream = model
    assert main([*base, f"{model}:2", "--stream", stream, "--percent", "5",
                 "--steps", "25,50,100", "--min-records", "200", "--min-labelled", "50",
                 "--max-accuracy-drop", "0.02"]) == 0
    out = capsys.readouterr().out
    assert f"canary {model}:2 on {stream}: 5% of the keys, then 25% -> 50% -> 100%" in out
    flat = " ".join(out.split())  # the console wraps long lines
    assert "every 200 candidate records and 50 labelled ones" in flat
    assert "live accuracy drops by more than 0.02" in flat
    st = current_rollout(conn, stream)
    assert st is not None and st.role == RolloutRole.CANARY and st.candidate_version == 2
    assert st.canary is not None and (st.canary.percent, st.canary.steps,
                                      st.canary.min_records) == (5, [25, 50, 100], 200)
    assert (st.canary.min_labelled, st.canary.max_accuracy_drop) == (50, 0.02)
    assert f"salt {st.canary.salt}" in out
    assert main([*base, model, "--stream", stream, "--stop"]) == 0
    assert f"stopped the canary of {model}:2 on {stream}" in capsys.readouterr().out
    ended = current_rollout(conn, stream)
    assert ended is not None and ended.candidate_version is None
    assert ended.reason == "stopped by the operator"
    assert main([*base, model, "--stream", stream, "--stop"]) == 0
    assert f"no canary of {model} on {stream}" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "says"), [
    (["{m}:2", "--percent", "0"], "--percent must be above 0 and below 100, got 0"),
    (["{m}:2", "--percent", "100"], "--percent must be above 0 and below 100, got 100"),
    (["{m}:2", "--percent", "10", "--steps", "50,25"], "--steps must rise above --percent 10"),
    (["{m}:2", "--percent", "10", "--steps", "5x"], "use comma-separated percents"),
    (["{m}", "--percent", "10"], "a canary needs NAME:VERSION"),
    (["{m}:1", "--percent", "10"], "{m}:1 is already production"),
    (["{m}:9", "--percent", "10"], "{m}"),
    (["{m}:2"], "give --percent (or --stop)"),
    (["{m}:2", "--percent", "10", "--min-records", "0"], "--min-records must be at least 1"),
    (["{m}:2", "--percent", "10", "--max-error-margin", "2"], "--max-error-margin must be"),
    (["{m}:2", "--percent", "10", "--min-labelled", "-1"], "--min-labelled must be 0 or more"),
    (["{m}:2", "--percent", "10", "--max-accuracy-drop", "1.5"],
     "--max-accuracy-drop must be between 0 and 1, got 1.5"),
    (["{m}:2", "--percent", "10", "--max-accuracy-drop", "x"], "--max-accuracy-drop"),
])
def test_bad_canary_input_is_one_line_and_a_non_zero_exit_before_any_broker_is_asked(
        dfs: Path, model: str, private_state: Path,
        capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    code = main(["--bootstrap", "127.0.0.1:1", "--dfs-root", str(dfs), "models", "canary",
                 *[a.format(m=model) for a in args], "--stream", model])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and err[0].startswith("headrace: "), err
    assert says.format(m=model) in err[0], err
