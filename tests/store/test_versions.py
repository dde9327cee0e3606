from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.contracts import Framework, Task
from headrace.store import versions
from headrace.store.manifest import Manifest


def _manifest(name: str = "iris") -> Manifest:
    return Manifest(name=name, framework=Framework.TENSORFLOW, task=Task.CLASSIFIER,
                    features=("a", "b"), label="y", classes=("x", "y"))


def _files(content: bytes) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        (d / "model.bin").write_bytes(content)
        (d / "sub").mkdir()
        (d / "sub" / "w.txt").write_text("weights")

    return write


def test_publish_numbers_versions_and_never_overwrites(dfs: Path) -> None:
    v1 = versions.publish(dfs, _manifest(), _files(b"one"))
    v2 = versions.publish(dfs, _manifest(), _files(b"two"))
    assert (v1.version, v2.version) == (1, 2)
    assert (v1.path / "model.bin").read_bytes() == b"one"
    assert set(v2.manifest.files) == {"model.bin", "sub/w.txt"}
    assert versions.list_versions(dfs, "iris") == [1, 2]
    assert versions.list_models(dfs) == ["iris"]


@pytest.mark.parametrize("step", ["files-written", "files-hashed", "manifest-written"])
def test_crash_at_each_publish_step_leaves_no_visible_version(dfs: Path, step: str) -> None:
    def crash(at: str) -> None:
        if at == step:
            raise KeyboardInterrupt(at)  # like a kill: not an OSError, nothing cleans up

    with pytest.raises(KeyboardInterrupt):
        versions.publish(dfs, _manifest(), _files(b"x"), hook=crash)
    assert versions.list_versions(dfs, "iris") == []
    assert versions.publish(dfs, _manifest(), _files(b"y")).version == 1


def test_alias_moves_atomically_and_keeps_history(dfs: Path) -> None:
    versions.publish(dfs, _manifest(), _files(b"one"))
    versions.publish(dfs, _manifest(), _files(b"two"))
    versions.set_alias(dfs, "iris", 1)
    p = versions.set_alias(dfs, "iris", 2, reason="better")
    assert (p.version, p.previous) == (2, 1)
    assert versions.resolve(dfs, "iris").version == 2
    assert versions.resolve(dfs, "iris:1").version == 1
    assert [h.version for h in versions.alias_history(dfs, "iris")] == [1, 2]


def test_a_corrupted_file_is_refused_with_a_clear_error(dfs: Path) -> None:
    mv = versions.publish(dfs, _manifest(), _files(b"good"))
    versions.set_alias(dfs, "iris", 1)
    (mv.path / "model.bin").write_bytes(b"evil")
    with pytest.raises(versions.IntegrityError, match=r"model\.bin has sha256"):
        versions.resolve(dfs, "iris")


@pytest.mark.parametrize("ref", ["../../etc", "iris:x", "a;ls", "nope"])
def test_bad_references_are_refused(dfs: Path, ref: str) -> None:
    with pytest.raises(versions.PermanentError):
        versions.resolve(dfs, ref)


def test_a_publishers_stale_staging_litter_is_swept_and_a_fresh_one_kept(dfs: Path) -> None:
    def crash(at: str) -> None:
        if at == "files-hashed":
            raise KeyboardInterrupt(at)  # a chief killed mid-publish

    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            versions.publish(dfs, _manifest(), _files(b"x"), hook=crash)
    staging = versions.model_dir(dfs, "iris") / versions.STAGING
    old, young = sorted(staging.iterdir())
    hours_ago = time.time() - 7 * 3600
    os.utime(old, (hours_ago, hours_ago))  # left by a publisher that died hours ago
    assert versions.publish(dfs, _manifest(), _files(b"y")).version == 1
    assert [p.name for p in staging.iterdir()] == [young.name]  # may still be in progress


# --- branches only the trainers' end-to-end tests reached --------------------------------------


def test_a_number_another_publisher_took_is_passed_over_and_theirs_kept(dfs: Path) -> None:
    theirs = versions.model_dir(dfs, "iris") / "1"

    def race(at: str) -> None:
        if at == "manifest-written" and not theirs.exists():
            theirs.mkdir(parents=True)  # another publisher renamed its version 1 in first
            (theirs / "model.bin").write_bytes(b"theirs")

    mine = versions.publish(dfs, _manifest(), _files(b"mine"), hook=race)
    assert mine.version > 1 and (mine.path / "model.bin").read_bytes() == b"mine"
    assert (theirs / "model.bin").read_bytes() == b"theirs"
    assert mine.manifest.version == mine.version  # the manifest names the number it got


def test_a_dfs_error_while_publishing_is_retriable_and_leaves_no_staging(dfs: Path) -> None:
    def full(d: Path) -> None:
        (d / "model.bin").write_bytes(b"x")
        raise OSError(28, "No space left on device")

    with pytest.raises(versions.RetriableError, match="No space left"):
        versions.publish(dfs, _manifest(), full)
    assert list((versions.model_dir(dfs, "iris") / versions.STAGING).iterdir()) == []
    assert versions.list_versions(dfs, "iris") == []


def test_files_that_would_replace_the_manifest_are_refused(dfs: Path) -> None:
    def sneaky(d: Path) -> None:
        (d / versions.MANIFEST).write_text("{}")

    with pytest.raises(versions.FatalError, match=r"must not include manifest\.json"):
        versions.publish(dfs, _manifest(), sneaky)
    assert versions.list_versions(dfs, "iris") == []


def test_a_manifest_rewritten_after_promotion_is_refused_by_the_alias(dfs: Path) -> None:
    mv = versions.publish(dfs, _manifest(), _files(b"one"))
    versions.set_alias(dfs, "iris", 1)
    # Files still match the manifest, but the manifest itself is not what was promoted.
    changed = mv.manifest.model_copy(update={"metrics": {"accuracy": 0.99}})
    (mv.path / versions.MANIFEST).write_text(changed.model_dump_json(indent=2))
    assert versions.resolve(dfs, "iris:1").manifest.metrics == {"accuracy": 0.99}
    with pytest.raises(versions.IntegrityError, match="changed since it was promoted"):
        versions.resolve(dfs, "iris")
    with pytest.raises(versions.VersionNotFound, match="no canary version"):
        versions.resolve(dfs, "iris@canary")


def test_a_torn_alias_pointer_is_retriable_and_a_missing_one_is_none(dfs: Path) -> None:
    versions.publish(dfs, _manifest(), _files(b"one"))
    assert versions.read_alias(dfs, "iris") is None and versions.alias_history(dfs, "iris") == []
    versions.set_alias(dfs, "iris", 1)
    pointer = versions.model_dir(dfs, "iris") / versions.ALIASES / "production.json"
    pointer.write_bytes(pointer.read_bytes()[:10])
    with pytest.raises(versions.RetriableError, match="alias iris@production unreadable"):
        versions.read_alias(dfs, "iris")


def test_listings_hold_only_versions_and_models(dfs: Path) -> None:
    versions.publish(dfs, _manifest(), _files(b"one"))
    mdir = versions.model_dir(dfs, "iris")
    (mdir / "7.tmp").mkdir()
    (mdir / "8").write_text("a file, not a version")
    (dfs / "models" / ".trash").mkdir()
    assert versions.list_versions(dfs, "iris") == [1]
    assert versions.list_models(dfs) == ["iris"]
    assert versions.list_versions(dfs, "absent") == [] and versions.list_models(dfs / "no") == []
