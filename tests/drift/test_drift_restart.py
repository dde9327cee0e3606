"""RELIABILITY: drift state survives a scorer restart. A scorer counts half a window, stops; a
new scorer process of the same partitions resumes that window (its counts, its offsets) and each
feature's run of drifting windows from control.drift.state, so the window closes with all its
records and ``consecutive`` goes on (2, not 1). Fails when the tap does not read its state back
(the window after the restart would be window 1 with half the records). Also: a new dominant
category is what drifts, and ``headrace drift`` shows it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.core.settings import Settings
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.topics import catalog, data_topic
from tests.fixtures import eventually, ready_scorer
from tests.scorers.test_drift_live import (
    OVERRIDES,
    WINDOW,
    drift_events,
    send,
    states,
    table,
    train,
    windows_closed,
)


@pytest.fixture
def stream(settings: Settings, conn: KafkaConnection) -> str:
    ensure_topics(conn, catalog(settings))
    return settings.streams[0]


@pytest.fixture
def data(settings: Settings) -> str:
    return data_topic(settings.streams[0])


def test_a_new_dominant_category_drifts_and_drift_state_survives_a_scorer_restart(
        settings: Settings, conn: KafkaConnection, dfs: Path, stream: str, data: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train(dfs, tmp_path, stream, "tensorflow")
    rng = np.random.default_rng(2)
    purple = table(rng, 2 * WINDOW, dominant="purple")
    with ready_scorer(settings, conn, **OVERRIDES):
        send(conn, data, {k: v[:WINDOW] for k, v in purple.items()}, "a")
        windows_closed(conn, stream, 1)
        half = {k: v[WINDOW: WINDOW + WINDOW // 2] for k, v in purple.items()}
        send(conn, data, half, "b")
        eventually(lambda: states(conn, stream)[-1].rows == WINDOW // 2, timeout_s=30,
                   what="half a window counted")
    before = states(conn, stream)[-1]
    assert before.consecutive["colour"] == 1 and before.drifting["colour"]
    # A new scorer process (same partitions) resumes the half-open window and the run.
    with ready_scorer(settings, conn, **OVERRIDES):
        send(conn, data, {k: v[WINDOW + WINDOW // 2:] for k, v in purple.items()}, "c")
        windows_closed(conn, stream, 2)
    colour = [e for e in drift_events(conn, stream) if e.feature == "colour"]
    assert [(e.window, e.drifting, e.consecutive) for e in colour] == [(1, True, 1),
                                                                       (2, True, 2)]
    assert colour[-1].rows == WINDOW and colour[-1].statistic == "chi_square"
    # The resumed window holds the offsets counted before the restart.
    firsts = {r.partition: r.first for r in colour[-1].ranges}
    b_offsets = {r.partition: r.first for r in before.ranges}
    assert all(firsts[p] <= o for p, o in b_offsets.items())

    # `headrace drift STREAM --png` shows what events.drift holds, and draws it.
    png = tmp_path / "drift.png"
    assert main(["--bootstrap", settings.bootstrap or "", "--dfs-root", str(dfs), "drift",
                 stream, "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {png} (5 features)" in out  # every feature: the last closed window's counts
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines()[2:]
             if ln.strip() and not ln.startswith("wrote")}
    assert lines["colour"][1:3] == ["DRIFTING", "chi_square"] and lines["colour"][5] == "2"
    assert lines["w"][1] == "-" and lines["size"][1] == "-"  # never drifted: no event
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--bootstrap", settings.bootstrap or "", "--dfs-root", str(dfs), "drift",
                 "nostream"]) == 1
    assert "no drift published for stream 'nostream'" in capsys.readouterr().err
