"""``models compare`` and ``models promote --if-live-gate`` on LiveCounts that real models'
predictions on real records made (``tests.rollout.live_models``), on the real broker."""

from __future__ import annotations

import io
import json
import os
import urllib.request
import uuid
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from headrace.cli import main
from headrace.contracts import LiveCounts, ModelPublished, RolloutRole, RolloutState, parse
from headrace.core.settings import Settings, load_settings
from headrace.ops.dashboard import Dashboard
from headrace.ops.rollout.control import current_rollout, publish_rollout
from headrace.store.versions import read_alias, set_alias
from headrace.streams.clients import KafkaConnection, ensure_topics
from headrace.streams.producing import send_events
from headrace.streams.topics import ControlTopics, catalog, data_topic
from tests.fixtures import read_all
from tests.rollout.live_models import publish_live_counts, publish_version
from tests.scorers.conftest import rows, send_json


def _cli(settings: Settings, topics: ControlTopics, *args: str) -> tuple[int, str, str]:
    """The CLI, its control topics under the test's prefix (HEADRACE_TOPIC_PREFIX, set by
    the ``live`` fixture)."""
    assert os.environ["HEADRACE_TOPIC_PREFIX"] == topics.prefix
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["--bootstrap", settings.bootstrap or "", "--dfs-root",
                     str(settings.dfs_root), *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def versions(broker: str, conn: KafkaConnection, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, str]:
    """Three versions of one model trained once for the module (v1 production, v2 better,
    v3 worse) and 600 records over 3 partitions: (DFS root, stream = model name)."""
    root = tmp_path_factory.mktemp("dfs")
    stream = f"s{uuid.uuid4().hex[:10]}"
    ensure_topics(conn, catalog(load_settings(bootstrap=broker, dfs_root=root,
                                              streams=[stream], partitions=3)))
    publish_version(root, stream, train=None, seed=3, alias=True)
    publish_version(root, stream, train="truth", seed=4)
    publish_version(root, stream, train="flipped", seed=5)
    send_json(conn, data_topic(stream), rows(600, seed=7))
    return root, stream


@pytest.fixture
def live(versions: tuple[Path, str], broker: str, conn: KafkaConnection,
         monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, Settings, ControlTopics]:
    """The module's model with v1 in production and no gates.yaml; the control topics under
    a fresh prefix (HEADRACE_TOPIC_PREFIX for the CLI too), so each test's are its own."""
    root, stream = versions
    set_alias(root, stream, 1, reason="test starts from v1")
    (root / "config" / "gates.yaml").unlink(missing_ok=True)
    s = load_settings(bootstrap=broker, dfs_root=root, streams=[stream], partitions=3,
                      topic_prefix="t" + uuid.uuid4().hex[:10])
    ensure_topics(conn, ControlTopics.of(s).specs())
    monkeypatch.setenv("HEADRACE_TOPIC_PREFIX", s.topic_prefix)
    return stream, stream, s, ControlTopics.of(s)


def test_compare_sums_every_partition_and_equals_the_offline_recount(
        live: tuple[str, str, Settings, ControlTopics], conn: KafkaConnection,
        tmp_path: Path) -> None:
    stream, name, s, topics = live
    dfs = s.dfs_root
    # A stale record of partition 0: the later one for the same key must replace it.
    send_events(conn, topics.rollout_live, [LiveCounts(
        stream=stream, model_name=name, production_version=1, candidate_version=2,
        role=RolloutRole.SHADOW, partition=0, next_offset=1, classes=["no", "yes"], rows=1,
        matrix=[[1, 0], [0, 0]])], key_of=lambda c: c.key())
    off = publish_live_counts(conn, dfs, topic=topics.rollout_live, data=data_topic(stream),
                              stream=stream, name=name, production=1, candidate=2)
    png = tmp_path / "compare.png"
    code, out, err = _cli(s, topics, "models", "compare", f"{name}:1", f"{name}:2", "--stream",
                          stream, "--json", "--png", str(png))
    assert code == 0, err
    got = json.loads(out)
    assert got["rows"] == off.rows == 600
    assert got["matrix"] == off.matrix.tolist()
    assert got["partitions"] == [0, 1, 2]
    assert got["agreement"] == pytest.approx(off.agreement)
    assert got["production_truth"] == off.production_truth.tolist()
    assert got["candidate_truth"] == off.candidate_truth.tolist()
    assert got["production_accuracy"] == pytest.approx(off.right(off.production_truth) / 600)
    assert got["candidate_accuracy"] == pytest.approx(off.right(off.candidate_truth) / 600)
    assert got["candidate_accuracy"] > 0.85 > got["production_accuracy"]
    lo, hi = got["candidate_accuracy_ci"]
    assert lo < got["candidate_accuracy"] < hi
    b, c = off.only_production_right, off.only_candidate_right
    assert (got["only_production_right"], got["only_candidate_right"]) == (b, c)
    assert got["mcnemar_p"] == pytest.approx(stats.binomtest(c, b + c).pvalue, abs=1e-9)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000

    # The other way round is the same evidence, transposed.
    code, out, _ = _cli(s, topics, "models", "compare", f"{name}:2", f"{name}:1", "--stream",
                        stream, "--json")
    back = json.loads(out)
    assert back["matrix"] == np.asarray(got["matrix"]).T.tolist()
    assert back["production_accuracy"] == got["candidate_accuracy"]

    code, text, _ = _cli(s, topics, "models", "compare", f"{name}:1", f"{name}:2", "--stream",
                         stream)
    assert code == 0 and "McNemar exact" in text and "Wilson" in text

    # The dashboard's panel shows the same figures.
    dash = Dashboard(settings=s, conn=conn)
    url = dash.start()
    try:
        with urllib.request.urlopen(url + "api/rollout", timeout=10) as r:
            (panel,) = json.loads(r.read())["pairs"]
    finally:
        dash.stop()
    assert panel["matrix"] == got["matrix"] and panel["agreement"] == got["agreement"]
    assert panel["summary"][0].startswith(f"{name} v1 vs v2 on {stream}: 600 paired rows")


def test_before_labels_compare_shows_the_cbpe_estimate_labelled_as_such(
        live: tuple[str, str, Settings, ControlTopics], conn: KafkaConnection) -> None:
    stream, name, s, topics = live
    dfs = s.dfs_root
    publish_live_counts(conn, dfs, topic=topics.rollout_live, data=data_topic(stream),
                        stream=stream, name=name, production=1, candidate=3, labelled=False)
    code, text, err = _cli(s, topics, "models", "compare", f"{name}:1", f"{name}:3",
                           "--stream", stream)
    assert code == 0, err
    assert "estimate (assumes calibration)" in text and "McNemar" not in text
    code, out, _ = _cli(s, topics, "models", "compare", f"{name}:1", f"{name}:3", "--stream",
                        stream, "--json")
    got = json.loads(out)
    assert got["labelled"] == 0 and got["mcnemar_p"] is None
    est = got["estimated_accuracy"]
    assert est["note"] == "estimate (assumes calibration)"
    assert 0.5 <= est["production"] <= 1 and 0.5 <= est["candidate"] <= 1
    # An unknown pair is one line, not a traceback.
    code, _, err = _cli(s, topics, "models", "compare", f"{name}:2", f"{name}:3", "--stream",
                        stream)
    assert code != 0 and "no live counts" in err and "Traceback" not in err


def test_the_live_gate_promotes_a_better_candidate_and_refuses_a_worse_one(
        live: tuple[str, str, Settings, ControlTopics], conn: KafkaConnection) -> None:
    stream, name, s, topics = live
    dfs = s.dfs_root
    (dfs / "config").mkdir(exist_ok=True)
    (dfs / "config" / "gates.yaml").write_text(yaml.safe_dump({"models": {name: {"live": {
        "min_rows": 500, "min_live_agreement": 0.0, "min_live_accuracy": 0.8,
        "max_live_confusion": [{"production": "no", "candidate": "no", "max_share": 1.0}],
        "better_than_production": {"alpha": 0.05}}}}}))
    for cand in (2, 3):
        publish_live_counts(conn, dfs, topic=topics.rollout_live, data=data_topic(stream),
                            stream=stream, name=name, production=1, candidate=cand)

    code, out, err = _cli(s, topics, "models", "promote", f"{name}:3", "--if-live-gate")
    assert code != 0 and "Traceback" not in err
    assert "not promoted" in out
    failed = [ln for ln in err.splitlines() if "FAILED" in ln]
    assert any("better_than_production" in ln for ln in failed)
    assert any("min_live_accuracy" in ln for ln in failed)
    assert read_alias(dfs, name).version == 1  # type: ignore[union-attr]

    # A scheduled gate names the stream, not the version: it judges the running candidate.
    code, _, err = _cli(s, topics, "models", "promote", name, "--if-live-gate", "--stream",
                        stream)
    assert code != 0 and f"stream {stream} runs no shadow or canary of model {name}" in err
    publish_rollout(conn, topics, RolloutState(stream=stream, model_name=name,
                                               candidate_version=2, role=RolloutRole.SHADOW))
    code, out, err = _cli(s, topics, "models", "promote", name, "--if-live-gate",
                          "--stream", stream)
    assert code == 0, err
    ended = current_rollout(conn, stream, topics=topics)
    assert ended is not None and ended.candidate_version is None  # the promoted shadow ends
    assert ended.reason == f"{name}:2 promoted by the live gate"
    assert f"{name}:2 is production" in out
    assert "FAILED" not in out and "held: better_than_production" in out
    assert read_alias(dfs, name).version == 2  # type: ignore[union-attr]
    published = [parse(ModelPublished, r.value or b"") for r in read_all(conn, topics.models)]
    assert [(e.version, e.previous_version) for e in published] == [(2, 1)]


def test_the_live_gate_needs_labels_and_live_rules(
        live: tuple[str, str, Settings, ControlTopics], conn: KafkaConnection) -> None:
    stream, name, s, topics = live
    dfs = s.dfs_root
    publish_live_counts(conn, dfs, topic=topics.rollout_live, data=data_topic(stream),
                        stream=stream, name=name, production=1, candidate=2, labelled=False)
    code, _, err = _cli(s, topics, "models", "promote", f"{name}:2", "--if-live-gate")
    assert code != 0 and "no live rules" in err and "Traceback" not in err
    (dfs / "config").mkdir(exist_ok=True)
    (dfs / "config" / "gates.yaml").write_text(yaml.safe_dump({"default": {"live": {
        "min_rows": 100, "better_than_production": {"alpha": 0.05}}}}))
    code, _, err = _cli(s, topics, "models", "promote", f"{name}:2", "--if-live-gate")
    assert code != 0 and "FAILED: labels: no labelled records" in err
    assert "held: min_rows: 600 paired rows" in err
    assert read_alias(dfs, name).version == 1  # type: ignore[union-attr]
