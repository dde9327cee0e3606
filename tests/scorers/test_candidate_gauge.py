"""``headrace_rollout_candidate``: which candidate each rollout role of a scorer wants and where
its loading is (loading, loaded, failed), one gauge for every role."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from headrace.core.errors import PermanentError
from headrace.scorers.engine.models import Sizing
from headrace.scorers.rollout import candidates
from headrace.scorers.rollout.candidates import CandidateLoader, watch_loading
from tests.fixtures import eventually


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.stream = "s"


class _Ctx:
    def __init__(self) -> None:
        self.metrics = _Metrics()
        self.shared: dict[str, Any] = {}


def _lines(ctx: _Ctx) -> list[str]:
    text = generate_latest(ctx.metrics.registry).decode()  # type: ignore[arg-type]
    return sorted(line for line in text.splitlines()
                  if line.startswith("headrace_rollout_candidate{"))


def _loader() -> CandidateLoader:
    return CandidateLoader(root=Path("/nonexistent"), device="cpu", max_batch=8,
                           sizes=Sizing())


def test_each_role_shows_its_candidate_loading_then_loaded_or_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    loaded = object()

    def load_ref(*, ref: str, **_: Any) -> Any:
        release.wait(10)
        if ref == "m:3":
            raise PermanentError("sha256 mismatch")
        return loaded

    monkeypatch.setattr(candidates, "load_ref", load_ref)
    ctx = _Ctx()
    shadow, canary = _loader(), _loader()
    watch_loading(ctx, "shadow", shadow)  # type: ignore[arg-type]
    watch_loading(ctx, "canary", canary)  # type: ignore[arg-type]
    assert _lines(ctx) == []  # nothing wanted
    assert shadow.want("m", 2) is None and canary.want("m", 3) is None
    assert _lines(ctx) == [
        'headrace_rollout_candidate{candidate="m:2",role="shadow",state="loading",stream="s"} 1.0',
        'headrace_rollout_candidate{candidate="m:3",role="canary",state="loading",stream="s"} 1.0']
    release.set()
    eventually(lambda: shadow.loaded is not None and canary.failure is not None,
               what="both loads ended")
    assert _lines(ctx) == [
        'headrace_rollout_candidate{candidate="m:2",role="shadow",state="loaded",stream="s"} 1.0',
        'headrace_rollout_candidate{candidate="m:3",role="canary",state="failed",stream="s"} 1.0']
    shadow.drop()
    assert _lines(ctx) == [
        'headrace_rollout_candidate{candidate="m:3",role="canary",state="failed",stream="s"} 1.0']
