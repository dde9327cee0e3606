"""The dashboard's studies panel: ``/api/studies`` reads every ``headrace tune`` study from its
journal on the DFS, and the page renders it in Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from headrace.core.settings import Settings
from headrace.ops.dashboard import Dashboard
from headrace.trainers.tuning import StudyConfig, parse_space, storage
from tests.browser import chromium, needs_chromium, panel_text
from tests.ops.http_json import get_ok


def _study(root: Path) -> None:
    """A study of three trials as `headrace tune` leaves it: two complete, one pruned."""
    c = storage.write_config(root, StudyConfig(
        name="wine", model_name="wine", framework="mxnet", dataset_uri="datasets/w.parquet",
        space="learning_rate=log:1e-4:1e-1 batch_size=32,64"))
    study = storage.load_study(root, c)
    space = parse_space(c.space)
    for i, (value, state) in enumerate([(0.52, TrialState.COMPLETE),
                                        (0.31, TrialState.COMPLETE), (None, TrialState.PRUNED)]):
        t = study.ask(space.distributions)
        t.set_user_attr("job_id", f"j-trial{i}")
        t.set_user_attr("version", i + 1)
        t.set_user_attr("promoted", i == 1)
        t.report(0.9, 1)
        study.tell(t, value, state=state)
    (root / "studies" / "broken").mkdir(parents=True)
    (root / "studies" / "broken" / "study.json").write_text("{")


@pytest.fixture
def dash(settings: Settings) -> Iterator[Dashboard]:
    _study(settings.dfs_root)
    d = Dashboard(settings=settings, conn=None)
    d.start()
    yield d
    d.stop()


def test_api_lists_each_study_with_its_trials_and_best(dash: Dashboard) -> None:
    body = get_ok(dash.url + "api/studies")
    broken, wine = body["studies"]
    assert broken["name"] == "broken" and "study.json unreadable" in broken["error"]
    assert (wine["name"], wine["metric"], wine["direction"]) == ("wine", "loss", "minimize")
    assert wine["states"] == {"complete": 2, "pruned": 1}
    assert [(t["number"], t["state"], t["value"], t["job_id"], t["version"])
            for t in wine["trials"]] == [(0, "complete", 0.52, "j-trial0", 1),
                                         (1, "complete", 0.31, "j-trial1", 2),
                                         (2, "pruned", None, "j-trial2", 3)]
    assert wine["best"]["number"] == 1 and wine["best"]["promoted"] is True
    assert set(wine["trials"][0]["params"]) == {"learning_rate", "batch_size"}


def test_api_without_studies_says_so(settings: Settings) -> None:
    d = Dashboard(settings=settings, conn=None)
    d.start()
    try:
        assert get_ok(d.url + "api/studies") == {"studies": []}
    finally:
        d.stop()


@needs_chromium
def test_page_renders_the_studies_panel_in_chromium(dash: Dashboard) -> None:
    with chromium() as driver:
        driver.get(dash.url)
        text = panel_text(driver, "studies", "j-trial2")
    assert "wine: mxnet mlp, minimize loss · 2 complete, 1 pruned" in text
    assert "1 *" in text and "0.3100" in text and "2 (promoted)" in text
    assert "broken" in text and "study.json unreadable" in text
