"""The alias's intact previous version: candidates newest first from the alias's history, a
candidate refused when it does not load or its manifest changed since it was promoted, and a
warning that names the command that fits (rollback to the previous one, else promote)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from headrace.scorers.engine.fallback import candidates, fallback_message, load_previous
from headrace.scorers.engine.models import LoadedModel
from headrace.store.dfs import model_dir
from headrace.store.versions import AliasPointer, IntegrityError


def _history(root: Path, *pointers: AliasPointer) -> AliasPointer:
    d = model_dir(root, "churn") / "aliases"
    d.mkdir(parents=True)
    (d / "production.history.jsonl").write_text(
        "".join(json.dumps(p.__dict__) + "\n" for p in pointers))
    (d / "production.json").write_text(json.dumps(pointers[-1].__dict__))
    return pointers[-1]


def _p(version: int, previous: int | None) -> AliasPointer:
    return AliasPointer(version=version, manifest_sha256=f"sha{version}", previous=previous,
                        updated_at="2026-01-01T00:00:00+00:00")


def test_candidates_are_the_previous_then_older_promotions_never_the_current(
        tmp_path: Path) -> None:
    now = _history(tmp_path, _p(1, None), _p(2, 1), _p(1, 2), _p(3, 1))  # 1 was rolled back to
    assert candidates(tmp_path, "churn", "production", now) == [(1, "sha1"), (2, "sha2")]


def test_a_corrupt_previous_is_skipped_for_an_older_intact_one_and_promote_is_suggested(
        tmp_path: Path) -> None:
    now = _history(tmp_path, _p(1, None), _p(2, 1), _p(3, 2))
    tried: list[str] = []

    def load(ref: str) -> LoadedModel:
        tried.append(ref)
        if ref == "churn:2":
            raise IntegrityError("churn:2: file model.keras has sha256 0000…")
        return cast(LoadedModel, SimpleNamespace(version=int(ref[-1]), manifest_sha256="sha1"))

    model = load_previous(tmp_path, "churn", "production", now, load)
    assert model is not None and model.version == 1 and tried == ["churn:2", "churn:1"]
    msg = fallback_message("churn", "production", now, 1, "corrupt")
    assert msg.startswith("model churn@production names churn:3, which cannot be served "
                          "(corrupt); serving churn:1")
    assert "`headrace models promote churn:1` points production at it" in msg
    assert "`headrace models rollback churn` points production back at it" in \
        fallback_message("churn", "production", now, 2, "corrupt")


def test_a_candidate_whose_manifest_changed_since_its_promotion_is_refused(
        tmp_path: Path) -> None:
    now = _history(tmp_path, _p(1, None), _p(2, 1))

    def load(ref: str) -> Any:
        return SimpleNamespace(version=1, manifest_sha256="rewritten")

    assert load_previous(tmp_path, "churn", "production", now, load) is None
