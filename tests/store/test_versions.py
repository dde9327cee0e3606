from __future__ import annotations

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
