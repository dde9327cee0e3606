"""The one rollout-candidate loader (canary and shadow): ``prepare`` runs in the loading thread
before the model loads, a loaded candidate is kept while it is wanted, and one that fails for
good is reported once and not tried again until the rollout changes."""

from __future__ import annotations

from pathlib import Path

from headrace.core.errors import PermanentError
from headrace.scorers.engine.models import Sizing
from headrace.scorers.rollout.candidates import CandidateLoader
from tests.scorers.conftest import publish_tf


def _loader(dfs: Path, calls: list[tuple[str, int]], fail: bool = False) -> CandidateLoader:
    def prepare(name: str, version: int) -> None:
        calls.append((name, version))
        if fail:
            raise PermanentError("the shadow topic was refused")

    return CandidateLoader(root=dfs, device="cpu", max_batch=64, sizes=Sizing(),
                           prepare=prepare)


def test_prepare_runs_before_the_candidate_loads_and_a_loaded_one_is_kept(dfs: Path) -> None:
    publish_tf(dfs, "m", seed=1)
    v2 = publish_tf(dfs, "m", seed=2, alias=False)
    calls: list[tuple[str, int]] = []
    loader = _loader(dfs, calls)
    got = loader.want("m", v2.version, wait=True)
    assert got is not None and got.version == v2.version and loader.loaded is got
    assert calls == [("m", v2.version)]
    assert loader.want("m", v2.version) is got and calls == [("m", v2.version)]  # once
    loader.drop()
    assert loader.loaded is None and loader.failure is None


def test_a_candidate_that_fails_for_good_is_reported_once_until_the_rollout_changes(
        dfs: Path) -> None:
    publish_tf(dfs, "m", seed=1)
    calls: list[tuple[str, int]] = []
    loader = _loader(dfs, calls, fail=True)
    assert loader.want("m", 2, wait=True) is None
    assert loader.failure == "candidate m:2 does not load: the shadow topic was refused"
    assert loader.want("m", 2) is None and calls == [("m", 2)]  # not tried again
    loader.drop()  # the rollout ended; a new one wants it again
    assert loader.want("m", 2, wait=True) is None and calls == [("m", 2), ("m", 2)]
    missing = CandidateLoader(root=dfs, device="cpu", max_batch=64, sizes=Sizing())
    assert missing.want("m", 9, wait=True) is None
    assert missing.failure is not None and "m:9" in missing.failure
